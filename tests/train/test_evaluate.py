"""`forgeplay train eval`: greedy tool-use rollouts on held-out triples, printed as a table of
rates and a table per question type; the per-type rows add up to the whole."""

import pytest

from tests.train.test_distributed import _cli
from tests.train.test_sft import traj_root  # noqa: F401 (fixture)


def test_eval_cli_prints_rates_and_per_type_rows(traj_root, tiny_llama_dir):  # noqa: F811
    root, _ = traj_root
    res = _cli(["train", "eval", "--data", "w", "--model", str(tiny_llama_dir), "--limit", "6", "--max-turns", "1",
                "--max-new-tokens", "8", "--tool-style", "compact", "--data-root", str(root)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "well_formed" in out and "by question type" in out, out
    # one row per question type and hop count of the 6 held-out triples
    from train.evaluate import held_out_triples

    for t in held_out_triples(root, "w", True, 6):
        assert f"{t['qtype']}/{t['hop_count']}" in out, out


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
    assert res.exit_code == 2 and "--data is required" in res.output
