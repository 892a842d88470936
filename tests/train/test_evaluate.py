"""`forgeplay train eval`: greedy tool-use rollouts on held-out triples, printed as a table of
rates and a table per question type; the per-type rows add up to the whole."""

import pytest

from tests.train.test_distributed import _cli
from tests.train.test_sft import traj_root  # noqa: F401 (fixture)


def test_eval_cli_prints_rates_and_per_type_rows(traj_root, tiny_llama_dir):  # noqa: F811
    root, _ = traj_root
    res = _cli(["train", "eval", "--dataset", "w", "--model", str(tiny_llama_dir), "--limit", "6", "--max-turns", "1",
                "--max-new-tokens", "8", "--tool-style", "compact", "--data-root", str(root)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "well_formed" in out and "by question type" in out, out
    # one row per question type and hop count of the 6 held-out triples
    from train.evaluate import held_out_triples

    for t in held_out_triples(root, "w", True, 6):
        assert f"{t['qtype']}/{t['hop_count']}" in out, out


def test_eval_warns_once_when_the_model_was_trained_on_longer_turns(traj_root, tiny_llama_dir, tmp_path):  # noqa: F811
    """A model whose forgeplay-model.json records longer trained turns than `--max-new-tokens`:
    `train eval` warns once (before its rollouts start) and the summary carries the warning."""
    import json
    import shutil

    from generators.llm.model_store import MARKER
    from train.evaluate import EvalConfig, run_eval

    root, _ = traj_root
    model = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, model)
    (model / MARKER).write_text(json.dumps({"longest_turn": 9}))
    args = ["--dataset", "w", "--limit", "2", "--max-turns", "1", "--tool-style", "compact", "--data-root", str(root)]
    res = _cli(["train", "eval", "--model", str(model), "--max-new-tokens", "8", *args])
    said = "up to 9 tokens, more than --max-new-tokens 8"
    assert res.exit_code == 0 and " ".join(res.output.split()).count(said) == 1, res.output
    heard = []
    s = run_eval(EvalConfig(data="w", model=str(model), limit=2, max_turns=1, max_new_tokens=9, tool_style="compact"),
                 root, progress=False, warn=heard.append)
    assert heard == s["warnings"] == []  # 9 tokens fit
    s = run_eval(EvalConfig(data="w", model=str(model), limit=2, max_turns=1, max_new_tokens=8, tool_style="compact"),
                 root, progress=False, warn=heard.append)
    assert heard == s["warnings"] and len(heard) == 1 and said in heard[0]


def test_by_qtype_rows_add_up_to_the_summary(traj_root, tiny_llama_dir):  # noqa: F811
    from generators.llm.transformers_backend import TransformersBackend
    from train.evaluate import EvalConfig, evaluate, held_out_triples

    root, rows = traj_root
    triples = held_out_triples(root, "w", True, 8)
    assert not {t["triple_id"] for t in triples} & {r["triple_id"] for r in rows}
    be = TransformersBackend(str(tiny_llama_dir), batch_size=8)
    try:
        s, outs = evaluate(be, root, EvalConfig(data="w", limit=8, max_turns=1, max_new_tokens=8, tool_style="compact"))
    finally:
        be.close()
    assert s["rollouts"] == len(outs) == 8
    kinds = {f"{t['qtype']}/{t['hop_count']}" for t in triples}
    assert set(s["by_qtype"]) == kinds
    assert sum(r["rollouts"] for r in s["by_qtype"].values()) == 8
    for k in ("answered", "em", "well_formed"):
        assert sum(r[k] * r["rollouts"] for r in s["by_qtype"].values()) == pytest.approx(s[k] * 8)


def test_eval_without_data_is_a_user_error(tiny_llama_dir):
    res = _cli(["train", "eval", "--model", str(tiny_llama_dir)])
    assert res.exit_code == 2 and "--dataset is required" in res.output
