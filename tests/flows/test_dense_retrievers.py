"""The dense and hybrid retrievers with the real MiniLM encoder: synthesis with each, then
validation in a fresh index (vectors read back from disk, queries encoded again) replays every
trajectory byte for byte."""

from collections import Counter

import numpy as np
import pytest

from flows.synthesize import run as synthesize
from flows.validate import run as validate
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from generators.tools import retriever
from generators.tools.dense import DenseIndex
from storage import load_table
from validators.validator import ValidateConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("dense") / "data"
    write(WorldConfig(seed=3, entities=120), root, "w")
    return root


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_dense_and_hybrid_synthesize_and_replay_byte_for_byte(world, kind):
    out = f"w_{kind}"
    summary = synthesize(SynthConfig(dataset="w", n=10, texts="template", retriever=kind), BackendConfig(), world,
                         progress=False)
    assert summary["written"] == 10
    retriever._BUILT.clear()  # validation builds its own index: vectors from disk, queries encoded anew
    validate(ValidateConfig(dataset="w", out=out, retriever=kind, run_id=f"v-{kind}"), data_root=world,
             progress=False)
    made = load_table("w", "trajectories", world, run_id=summary["run_id"]).to_pylist()
    ours = {r["id"] for r in made} | {r["traj_id"] for r in made}
    verdicts = [v for v in load_table("w", "verdicts", world, run_id=f"v-{kind}").to_pylist() if v["check"] == "replay"]
    assert Counter(v["reason"] for v in verdicts if v["record_id"] in ours) == Counter({"ok": 10})
    # (with hybrid, the dense run's trajectories are checked too: any that differ are the retriever's doing)
    assert {v["reason"] for v in verdicts} <= {"ok", "retriever_changed"}


def test_the_index_vectors_do_not_depend_on_the_run(world):
    docs = load_table("w", "documents", world).to_pylist()
    passages = retriever.Corpus.of(docs).passages
    kept = DenseIndex(passages, index_dir=retriever.index_dir(world))  # read back from disk
    fresh = DenseIndex(passages)  # encoded again
    assert kept.fingerprint == fresh.fingerprint
    assert np.array_equal(kept.vectors, fresh.vectors)
