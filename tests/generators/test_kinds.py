"""The one table of backend kinds (generators/llm/kinds.py): the registry builds exactly the
kinds the table says a BackendConfig builds, each option's choices are the kinds with what its
stage needs, and a choice that lacks it is refused with what it lacks and what would do."""

from __future__ import annotations

import dataclasses

import pytest

from generators.llm.kinds import CONFIG, FOLLOW, KINDS, ROLLOUT, SHIP, SWAP, kinds_with, require
from generators.llm.registry import BACKENDS


def test_the_registry_builds_the_kinds_the_table_says():
    assert tuple(BACKENDS) == kinds_with(CONFIG)


def test_each_stage_offers_the_kinds_with_what_it_needs():
    from acquire.session import AcquireConfig
    from selfplay.play import PlayConfig
    from storage.configcli import choices
    from train.configs import GRPOConfig
    from train.evaluate import EvalConfig

    def offered(cls, name):
        return choices(next(f for f in dataclasses.fields(cls) if f.name == name))

    assert offered(GRPOConfig, "rollout_backend") == kinds_with(FOLLOW) == ("transformers", "vllm", "vllm-server")
    assert offered(PlayConfig, "rollout_backend") == kinds_with(SWAP) == ("transformers", "vllm-server")
    assert offered(EvalConfig, "backend") == offered(AcquireConfig, "backend") == kinds_with(ROLLOUT)
    assert kinds_with(ROLLOUT) == ("transformers", "vllm-server", "openai")
    assert kinds_with(SHIP) == ("openai",)


@pytest.mark.parametrize("kind, needs, message", [
    ("nope", (CONFIG,), "unknown --backend 'nope': choose one of transformers, vllm, openai"),
    ("vllm-server", (CONFIG,), "--backend vllm-server cannot be built from the backend options here"),
    ("openai", (FOLLOW, SWAP), "cannot sample from the weights being trained or let several models take turns"),
])
def test_a_kind_that_lacks_a_need_is_refused_in_one_line(kind, needs, message):
    with pytest.raises(ValueError, match="^[^\n]+$") as e:
        require(kind, "--backend", *needs)
    assert message in str(e.value)


def test_every_kind_can_sample_and_every_need_has_a_kind():
    from generators.llm.kinds import WHAT

    assert all("generate" in can for can in KINDS.values())
    assert all(kinds_with(n) for n in WHAT)
    for kind in KINDS:
        require(kind, "--backend", *KINDS[kind])  # (no error: a kind can do what it says)
