"""A test split kept out of training: `synthesize --hold-out FILE` builds no trajectory from
its triples, and `train eval --hold-out FILE` asks exactly them, refusing a split that
leaked into training. The real synthesize flow (template texts, no model) on a world corpus."""

import pytest

from flows.synthesize import run
from generators.corpus.build import WorldConfig, write
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from storage import load_table
from train.evaluate import held_out_triples


@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write(WorldConfig(seed=3, entities=200), root, "w")
    ids = sorted(load_table("w", "triples", root).column("triple_id").to_pylist())
    split = root / "split.txt"
    split.write_text("\n".join(ids[::3][:12]) + "\n")
    cfg = SynthConfig(dataset="w", n=40, texts="template", variants_per_tool=0, hold_out=str(split))
    return root, split, ids[::3][:12], run(cfg, BackendConfig(), root, progress=False)


def test_synthesis_uses_no_held_out_triple_and_eval_asks_exactly_them(split_run):
    root, split, held, out = split_run
    used = set(load_table("w", "trajectories", root).column("triple_id").to_pylist())
    assert out["written"] == 40 and not used & set(held)
    asked = held_out_triples(root, "w", True, 0, str(split))
    assert [t["triple_id"] for t in asked] == held  # all of them, by id, whatever else training left unused
    assert [t["triple_id"] for t in held_out_triples(root, "w", True, 5, str(split))] == held[:5]
    assert len(held_out_triples(root, "w", True, 0)) > len(held)  # without the file: every unused triple


def test_eval_refuses_a_split_that_training_used(split_run, tmp_path):
    root, _, held, _ = split_run
    used = sorted(set(load_table("w", "trajectories", root).column("triple_id").to_pylist()))
    leaked = tmp_path / "leaked.txt"
    leaked.write_text("\n".join(held[:3] + used[:2]) + "\n")
    with pytest.raises(ValueError, match="were built from 2 of its triples"):
        held_out_triples(root, "w", True, 0, str(leaked))
    stray = tmp_path / "stray.txt"
    stray.write_text("tri-nowhere\n")
    with pytest.raises(ValueError, match="does not hold, e.g. 'tri-nowhere'"):
        held_out_triples(root, "w", True, 0, str(stray))


def test_a_split_makes_its_own_run(split_run):  # last: it changes the split file
    root, split, held, out = split_run
    cfg = SynthConfig(dataset="w", n=40, texts="template", variants_per_tool=0, hold_out=str(split))
    again = run(cfg, BackendConfig(), root, progress=False)
    assert again["run_id"] == out["run_id"] and again["written"] == 0  # a rerun duplicates nothing
    split.write_text("\n".join(held[:6]) + "\n")  # the same file, another split: another run
    other = run(cfg, BackendConfig(), root, progress=False)
    assert other["run_id"] != out["run_id"] and other["written"] == 40
