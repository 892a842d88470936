"""Slow: SFT of the embedded model on validated, synthesized trajectories raises, on held-out
world triples, the rate of well-formed tool calls and of answered rollouts, and does not lower
the answer exact match. Every stage is the real one: world corpus, the synthesize, validate
and train-sft Prefect flows, and greedy multi-turn rollouts through the BM25 simulator.

Measured with 50 steps x 4 and 48 triples: well-formed calls 0 -> 0.96, answered 0.02 -> 0.96,
exact match 0 -> 0.02. The 135M model learns the calling protocol and the route, but most
held-out questions need a comparison or arithmetic over the retrieved facts, which it does not
get right; a measurable exact-match gain is not shown at this scale (see the issue's note)."""

import json

import pytest

pytestmark = pytest.mark.slow

N_TRAJ = 240  # synthesized; the validated ones are the SFT data
HELD_OUT = 24


def test_sft_raises_well_formed_calls_and_answers_on_held_out_triples(embedded_dir, tmp_path):
    from flows.synthesize import run as synthesize
    from flows.train import run_sft
    from flows.validate import run as validate
    from generators.corpus.build import WorldConfig, write
    from generators.llm.registry import BackendConfig
    from generators.llm.transformers_backend import TransformersBackend
    from generators.synth.synthesize import SynthConfig
    from train.configs import SFTConfig, TrainConfig
    from train.evaluate import EvalConfig, evaluate, held_out_triples
    from validators.runner import ValidateConfig

    root = tmp_path / "data"
    write(WorldConfig(seed=5, entities=1000), root, "w")
    # compact tools and top_k=2 keep conversations near 1.3k tokens; the program writes the texts
    synth = SynthConfig(dataset="w", n=N_TRAJ, seed=5, tool_style="compact", top_k_rate=1.0, top_k="2",
                        texts="template", distractors_min=1, distractors_max=3, case_mix="clean=0.7,wrong_args=0.3")
    s = synthesize(synth, BackendConfig(), root, progress=False)
    v = validate(ValidateConfig(dataset="w"), None, root, progress=False)
    assert v["rows_in"] == N_TRAJ and v["rows_out"] >= 0.9 * N_TRAJ, v["funnel"]

    ecfg = EvalConfig(data="w", limit=HELD_OUT, tool_style="compact", max_turns=3, max_new_tokens=80)
    held = {t["triple_id"] for t in held_out_triples(root, "w", True, HELD_OUT)}
    from storage import load_table

    trained_on = set(load_table("w", "trajectories", root, columns=["triple_id"]).column("triple_id").to_pylist())
    assert len(held) == HELD_OUT and not held & trained_on

    def measure(model_dir):
        be = TransformersBackend(model_dir, batch_size=16)
        try:
            return evaluate(be, root, ecfg)[0]
        finally:
            be.close()

    before = measure(embedded_dir)
    print("before", before, flush=True)
    out = tmp_path / "run"
    summary = run_sft(SFTConfig(data="w", model=str(embedded_dir), out=str(out), max_len=1600, train_layers=10),
                      TrainConfig(max_steps=25, batch_size=4, lr=3e-4, warmup_steps=3, checkpoint_every=0),
                      root, progress=False)
    assert summary["counts"]["kept"] >= 100, summary["counts"]
    after = measure(summary["final_model"])
    (tmp_path / "figures.json").write_text(json.dumps({"before": before, "after": after, "sft": summary["counts"]}))
    print("before", before, "\nafter", after, "\nsft", summary["counts"], summary["first"]["loss"], summary["last"]["loss"])

    assert summary["last"]["loss"] < summary["first"]["loss"]
    assert after["well_formed"] >= before["well_formed"] + 0.5, (before, after)
    assert after["answered"] >= before["answered"] + 0.5, (before, after)
    assert after["em"] >= before["em"], (before, after)
