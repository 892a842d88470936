"""Fixtures for validator tests: a real world corpus, tool bank and synthesized trajectories
(the LLM is the expensive boundary; the synthesis tests' ScriptedBackend stands in)."""

import pytest

from tests.generators.conftest import embedded_dir, embedded_tokenizer_dir, model_cache, tiny_llama_dir  # noqa: F401


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """(root, clean trajectory rows, documents, bank rows) for dataset "w"."""
    from generators.corpus.build import WorldConfig, write
    from generators.synth.synthesize import Session, SynthConfig, load_inputs
    from generators.tools.bank import build_bank
    from storage import load_table, write_rows
    from generators.llm.scripted import ScriptedBackend

    root = tmp_path_factory.mktemp("vdata")
    write(WorldConfig(seed=3, entities=200), root, "w")
    bank = build_bank(seed=3, variants_per_tool=1, calculator=True)  # computed answers call it
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=40, calculator=True), bank)
    rows, _ = s.trajectories(s.plans(), ScriptedBackend(), "run")
    write_rows(root, "w", "tools", "run", bank)
    write_rows(root, "w", "trajectories", "run", rows)
    docs = load_table("w", "documents", root).to_pylist()
    return root, rows, docs, bank


_SIMULATORS: dict = {}


def world_context(world):
    """A new RuleContext over the world's documents and bank. Its simulators, one per seed, are
    built on first use and shared by every context of this world, as validation shares them
    (validators/context.py)."""
    from generators.tools.simulator import Simulator
    from validators.trajectory_rules import RuleContext

    _, _, docs, bank = world

    def simulator(seed: int) -> Simulator:
        key = (id(docs), seed)
        if key not in _SIMULATORS:
            _SIMULATORS[key] = Simulator(docs, seed=seed, tools=bank)
        return _SIMULATORS[key]

    return RuleContext(simulator_for=simulator)


@pytest.fixture(scope="session")
def rule_ctx(world):
    return world_context(world)
