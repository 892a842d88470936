"""Slow: SFT of the embedded model on validated, synthesized trajectories, then greedy
multi-turn rollouts on held-out world triples. Every stage is the real one (world corpus, the
synthesize, validate and train-sft Prefect flows, rollouts through the BM25 simulator), run
by experiments/sft_tool_use.py at a size CI can afford on two cores (six steps of two
conversations, 8 held-out triples; 25 steps of four on 48 triples took over an hour here).

What six steps teach is the answer format: measured, answered 0.125 -> 0.875 on the 8 triples
(steps of four conversations on 16 triples: 0.125 -> 1.0, twice the training time), while
tool calls stay near 0 (the model answers at once). Well-formed calls and exact match need
the experiment's defaults (25 steps, 48 held-out triples: well-formed 0 -> 1.0, exact match
0 -> 0.125) and are reported from there, not asserted here.

Both evaluations go through one vLLM server from .venv-vllm when it exists (as in CI): the
fine-tuned weights are published to it after SFT, as GRPO publishes its policy (the rise in
`answered` then also shows that the served model changed with them). Without it,
they run in this process (transformers, turns continuing from their KV cache)."""

import pytest

from experiments.sft_tool_use import run
from generators.llm.vllm_server import ServerError, vllm_python

pytestmark = [pytest.mark.slow, pytest.mark.experiment]  # about 10 minutes: make test-experiments

N_TRAJ, HELD_OUT, STEPS, BATCH = 64, 8, 6, 2


def _evaluator() -> str:
    try:
        vllm_python()
    except ServerError:  # FORGEPLAY_REQUIRE_VLLM makes this an error (tests/conftest.py)
        return "transformers"
    return "vllm-server"


def test_a_short_sft_teaches_the_answer_format_on_held_out_triples(embedded_dir, tmp_path):
    r = run(tmp_path, str(embedded_dir), steps=STEPS, held_out=HELD_OUT, n_traj=N_TRAJ,
            batch_size=BATCH, backend=_evaluator())
    v, before, after, sft = r["validated"], r["before"], r["after"], r["sft"]
    print("before", before, "\nafter", after, "\nsft", sft["counts"], r["seconds"])
    assert v["rows_in"] == N_TRAJ and v["rows_out"] >= 0.9 * N_TRAJ, v["funnel"]
    assert len(r["held_out"]) == HELD_OUT and r["overlap"] == 0
    assert sft["counts"]["kept"] >= 0.9 * v["rows_out"], sft["counts"]
    assert sft["last"]["loss"] < sft["first"]["loss"]
    assert before["rollouts"] == after["rollouts"] == HELD_OUT
    # no calculator offered: every rollout is counted once, none called it
    assert sum(n for _, _, n in after["calculator"].values()) == HELD_OUT
    assert all(called == right == 0 for called, right, _ in after["calculator"].values()), after["calculator"]
    assert after["answered"] >= before["answered"] + 0.5, (before, after)
    # what the experiment reads back from the rollouts (experiments/reading.py) agrees with their stats
    for out in (before, after):
        chains = out["chains"].values()
        assert sum(c["rollouts"] for c in chains) == HELD_OUT
        assert sum(c["answered"] for c in chains) == round(out["answered"] * HELD_OUT)
        assert out["searches"].get("searches", 0) <= round(out["calls_per_rollout"] * HELD_OUT)
