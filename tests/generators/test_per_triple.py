"""Several trajectories per triple: `--n` past the number of triples gives that many, each
its own id and conversation (another route where the rounds allow it, another case, other
offered tools), every one passing every validation layer; a rerun writes nothing new; a `--n`
the triples cannot give stops early with the count and the reason, unless `--allow-fewer`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from generators.corpus.build import WorldConfig, write
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import build_bank

REPO = Path(__file__).resolve().parents[2]
CFG = SynthConfig(dataset="w", n=400, per_triple=5, texts="template")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("pt") / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")  # 100 triples
    return root, load_inputs(root, "w"), build_bank(seed=3, variants_per_tool=1)


def test_n_past_the_triples_gives_n_distinct_trajectories(world):
    _, inputs, bank = world
    s = Session(inputs, CFG, bank)
    plans = s.plans()
    assert len(plans) == 400 and s.triples_in_use() == 100 and s.capacity() == 500
    assert Counter(p.variant for p in plans) == {0: 100, 1: 100, 2: 100, 3: 100}
    rows, _ = s.trajectories(plans, None, "run")
    assert len({r["traj_id"] for r in rows}) == 400
    by_triple: dict[str, list[dict]] = {}
    for r in rows:
        by_triple.setdefault(r["triple_id"], []).append(r)
    assert all(len(v) == 4 for v in by_triple.values())
    for same in by_triple.values():  # no two conversations of a triple alike
        assert len({json.dumps(r["messages"], sort_keys=True) for r in same}) == 4
    wide = [v for v in by_triple.values() if v[0]["route"] in ("parallel", "mixed")]
    assert wide and all(v[1]["route"] == "sequential" for v in wide)  # odd variants look up one at a time
    assert len({(r["case"], r["route"]) for r in rows}) > len({(r["case"], r["route"]) for r in rows[:100]}) - 1
    assert Session(inputs, CFG, bank).plans() == plans  # deterministic


def test_the_first_trajectory_of_each_triple_is_the_one_made_before(world):
    """Up to the number of triples nothing changes: the same plans and ids as with one per triple."""
    _, inputs, bank = world
    few = Session(inputs, replace(CFG, n=60, per_triple=1), bank).plans()
    assert Session(inputs, replace(CFG, n=60), bank).plans() == few and {p.variant for p in few} == {0}


def test_too_many_stops_with_the_count_and_why_unless_allowed(world):
    _, inputs, bank = world
    s = Session(inputs, replace(CFG, n=900), bank)
    assert "allows 500: 100 triples in use x --per-triple 5" in s.shortfall()
    fewer = Session(inputs, replace(CFG, n=900, allow_fewer=True), bank)
    assert fewer.shortfall() is None and len(fewer.plans()) == 500


def test_unplannable_triples_are_counted_once_when_the_bank_moves_the_lookups(world):
    """A bank without every domain (a corpus bank, a user's tools) plans the triples again;
    the unplannable ones are counted once, not once per planning."""
    _, inputs, bank = world
    broken = [{**t, "golden_doc_ids": [*t["golden_doc_ids"], "doc-missing"]} if i < 2 else t
              for i, t in enumerate(inputs.triples)]
    s = Session(type(inputs)(inputs.documents, broken), CFG)
    s.shortfall()
    assert s.rejected == {"golden_doc_missing": 2}
    domains = sorted({t["domain"] for t in bank})
    s.set_tools([t for t in bank if t["domain"] != domains[0]])
    s.shortfall()
    assert s.rejected == {"golden_doc_missing": 2} and s.triples_in_use() == 98


def test_every_variant_passes_every_layer_and_a_rerun_writes_nothing(world, tmp_path):
    """Through the command line, as a user runs it: synthesize 3 per triple, validate with the
    default layers (replay, grounding, dedup), synthesize again; then a --n too large."""
    src, _, _ = world
    root = tmp_path / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "flows.cli", "--data-root", str(root), *args],
                              capture_output=True, text=True, cwd=REPO, timeout=900)

    first = cli("synthesize", "--dataset", "w", "--n", "300", "--texts", "template", "--chunk", "64")
    assert first.returncode == 0, first.stdout + first.stderr
    done = cli("validate", "--dataset", "w")
    assert done.returncode == 0, done.stdout + done.stderr
    from storage import Catalog

    with Catalog(root) as cat:
        assert cat.scalar("SELECT count(*) FROM w_trajectories") == 300
        assert cat.scalar("SELECT count(DISTINCT triple_id) FROM w_trajectories") == 100
        # the only rejects: a question that is a near copy of another triple's (this world has one
        # such pair, "Of A and B, which ..." and "Of B and A, which ..."), every trajectory of it
        rejects = cat.rows("SELECT v.reason, t.triple_id, d.triple_id FROM w_verdicts v "
                           "JOIN w_trajectories t ON t.id = v.record_id "
                           "JOIN w_trajectories d ON d.id = json_extract_string(v.detail, '$.duplicate_of') "
                           "WHERE NOT v.passed")
        assert cat.scalar("SELECT count(*) FROM w_verdicts WHERE NOT passed") == len(rejects) <= 3
        assert {r[0] for r in rejects} <= {"near_duplicate"} and all(r[1] != r[2] for r in rejects)
        assert cat.scalar("SELECT count(*) FROM w_valid_trajectories") == 300 - len(rejects)
    again = cli("synthesize", "--dataset", "w", "--n", "300", "--texts", "template", "--chunk", "64")
    assert again.returncode == 0 and "0 written" in again.stdout, again.stdout
    with Catalog(root) as cat:
        assert cat.scalar("SELECT count(*) FROM w_trajectories") == 300
    short = cli("synthesize", "--dataset", "w", "--n", "5000", "--texts", "template")
    assert short.returncode != 0 and "allows 800" in short.stdout + short.stderr
    fewer = cli("synthesize", "--dataset", "w", "--n", "5000", "--texts", "template", "--allow-fewer")
    assert fewer.returncode == 0 and "800 written" in fewer.stdout.replace("\n", " "), fewer.stdout
    # that run's first 300 are the first run's conversations again (another run id, the same
    # texts): validating the dataset again keeps one of each
    with Catalog(root) as cat:
        before = cat.scalar("SELECT count(*) FROM w_valid_trajectories")
    assert cli("validate", "--dataset", "w").returncode == 0
    with Catalog(root) as cat:
        assert cat.scalar("SELECT count(*) - count(DISTINCT hash(messages)) FROM w_valid_trajectories") == 0
        assert 490 <= cat.scalar("SELECT count(*) FROM w_valid_trajectories") - before <= 500
        assert cat.scalar("SELECT count(*) FROM w_verdicts WHERE reason = 'exact_duplicate'") >= 290
