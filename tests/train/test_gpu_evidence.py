"""experiments/gpu_evidence.py end to end at its tiny size on CPU: SFT, pi-Play with
distillation on and off, label-aware GRPO with care, random and oracle_cag, and one table of
held-out exact match with a column per evaluation of every arm (the real flows, a tiny random
Llama for speed; about 4 minutes on two busy cores, so slow)."""

import json

import pytest

from experiments.gpu_evidence import STRATEGIES, TINY, evidence, main, table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401


@pytest.mark.slow
@pytest.mark.experiment
def test_tiny_run_prints_every_arm_and_iteration(tiny_llama_dir, tmp_path, capsys):  # noqa: F811
    main(["--root", str(tmp_path / "r"), "--tiny", "--model", str(tiny_llama_dir), "--json", str(tmp_path / "r.json")])
    result = json.loads((tmp_path / "r.json").read_text())
    names = [name for name, _ in result["rows"]]
    assert names == ["pi-play distill on", "pi-play distill off"] + [f"grpo {s}" for s in STRATEGIES]
    for name, em in result["rows"]:  # before, then one per iteration (pi-Play) or per eval_every steps (GRPO)
        want = 1 + (TINY.iterations if name.startswith("pi-play") else TINY.grpo_steps // TINY.eval_every)
        assert len(em) == want and all(0.0 <= x <= 1.0 for x in em), (name, em)
    assert len({em[0] for _, em in result["rows"]}) == 1  # every arm starts from the same SFT model
    out = capsys.readouterr().out
    assert table({**result, "rows": [tuple(r) for r in result["rows"]]}, TINY) in out
    assert result["held_out"] == TINY.eval and set(result["seconds"]) >= {"sft", "pi-play on", "grpo care"}
    for s in STRATEGIES:  # each GRPO arm bought labels within the same budget
        recs = [json.loads(x) for x in (tmp_path / "r" / f"grpo_{s}" / "metrics.jsonl").read_text().splitlines()]
        assert len(recs) == TINY.grpo_steps and recs[-1]["budget_left"] >= 0


def test_a_used_root_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "w").mkdir()
    try:
        evidence(tmp_path, TINY)
    except SystemExit as e:
        assert "earlier run" in str(e)
    else:
        raise AssertionError("a used root was accepted")
