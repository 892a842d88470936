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


def test_each_kind_is_built_from_its_own_options_and_the_flat_config_holds_them_all():
    """BackendConfig is `backend` and the union of the kinds' options; the factory of the chosen
    kind gets that kind's options only, and an option of another kind set on the command line
    is refused before anything loads, naming the kinds that read it."""
    from generators.llm.registry import BackendConfig, OpenAIOptions, TransformersOptions, check_backend

    flat = [f.name for f in dataclasses.fields(BackendConfig)]
    union = {f.name for kind in BACKENDS.values() for f in dataclasses.fields(kind.options)}
    assert flat[0] == "backend" and set(flat[1:]) == union and len(flat) == len(union) + 1
    cfg = BackendConfig(backend="openai", base_url="http://127.0.0.1:9/v1", model="m", max_concurrency=32)
    assert cfg.options() == OpenAIOptions(model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=32)
    assert BackendConfig(batch_size=4).options() == TransformersOptions(batch_size=4)
    help_of = {f.name: f.metadata["help"] for f in dataclasses.fields(BackendConfig)}
    assert help_of["batch_size"].startswith("transformers only: ") and help_of["timeout"].startswith("openai only: ")
    assert "For openai: the model name the server knows" in help_of["model"]
    with pytest.raises(ValueError, match="^--batch-size is an option of --backend transformers; --backend openai does not"):
        check_backend(BackendConfig(backend="openai", base_url="http://127.0.0.1:9/v1", batch_size=4))
    with pytest.raises(ValueError, match="^--base-url is an option of --backend openai; --backend transformers does not"):
        check_backend(BackendConfig(base_url="http://127.0.0.1:9/v1"))
    check_backend(cfg)  # (its own options: no error)


def test_a_new_kind_is_its_options_its_factory_and_one_entry(monkeypatch):
    """A kind added to the registry gets its options on the flat config (help naming it), and
    make_backend hands its factory exactly its options."""
    from generators.llm import registry
    from generators.llm.scripted import ScriptedBackend

    @dataclasses.dataclass
    class EchoOptions:
        model: str | None = dataclasses.field(default=None, metadata={"help": registry.MODEL})
        reply: str = dataclasses.field(default="hello", metadata={"help": "what it answers."})

    got = []

    def make(opts, journal=None):
        got.append(opts)
        return ScriptedBackend()

    monkeypatch.setitem(registry.BACKENDS, "echo", registry.Kind(EchoOptions, make))
    flat = registry._flat_config()
    field = {f.name: f for f in dataclasses.fields(flat)}["reply"]
    assert field.metadata["help"] == "echo only: what it answers." and field.default == "hello"
    backend = registry.make_backend(flat(backend="echo", reply="hi"))
    assert got == [EchoOptions(reply="hi")] and isinstance(backend, ScriptedBackend)
