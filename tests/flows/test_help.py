"""Every command's `--help` (the click tree under `forgeplay`, every group and subcommand):
it exits 0, the command has a help line, and no option is undocumented. Options whose values
are a closed set list them (storage/configcli.py: `metadata["choices"]`), in `--help` and in
the loop config's schema, taken from the names the code checks against; options a command
cannot run without say `[required]` (not in the loop's schema, where the loop sets them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import click
import pytest
import typer
from typer.testing import CliRunner

from flows.cli import COMMANDS, app
from storage.configcli import config_command, json_schema

runner = CliRunner()


def commands() -> list[tuple[tuple[str, ...], click.Command]]:
    """(path, command) of every command and group under the root, loaded as `--help` loads them."""
    root = typer.main.get_command(app)
    ctx = click.Context(root)
    out, todo = [], [((name,), root.get_command(ctx, name)) for name in COMMANDS]
    while todo:
        path, cmd = todo.pop(0)
        out.append((path, cmd))
        if hasattr(cmd, "list_commands"):  # a group (typer's own click: no isinstance of click's classes)
            todo += [((*path, n), cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
    return out


ALL = commands()


def test_every_command_is_found():
    paths = {p for p, _ in ALL}
    assert set(COMMANDS) <= {p[0] for p in paths}
    assert {("train", "sft"), ("train", "grpo"), ("selfplay", "run"), ("corpus", "import")} <= paths


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_help_exits_0_and_documents_every_option(path):
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    cmd = dict(ALL)[path]
    assert (cmd.help or cmd.short_help or "").strip(), f"`forgeplay {' '.join(path)}` has no help line"
    bare = [p.opts[0] for p in cmd.params if p.param_type_name == "option" and not (p.help or "").strip()]
    assert not bare, f"`forgeplay {' '.join(path)}`: options without help: {bare}"


@pytest.mark.parametrize("path, option, names", [
    (("synthesize",), "--reasoning", "facts, brief, evidence, plan"),
    (("synthesize",), "--tool-style", "full, compact"),
    (("train", "grpo"), "--rollout-backend", "transformers, vllm, vllm-server"),
    (("train", "sft"), "--shard", "none, full, grad_op"),
    (("acquire-labels",), "--source", "column, queue, llm"),
    (("selfplay", "run"), "--rollout-backend", "transformers, vllm-server"),
    (("acquire-labels",), "--rollout-backend", "transformers, vllm-server, openai"),
    (("train", "grpo"), "--labels", "random, vote_entropy, token_prob, self_certainty, oracle_cag, care"),
    (("train", "grpo"), "--source", "column, queue, llm"),
])
def test_closed_sets_of_values_are_listed(path, option, names):
    cmd = dict(ALL)[path]
    opt = next(p for p in cmd.params if option in p.opts)
    assert opt.help.endswith(f"[choices: {names}]"), opt.help
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert f"[choices: {names}]" in " ".join(res.output.replace("│", " ").split())  # as read, across wrapped lines


def test_acquisition_strategies_are_listed_from_their_registry():
    from acquire.strategies import STRATEGIES

    cmd = dict(ALL)[("acquire-labels",)]
    opt = next(p for p in cmd.params if "--strategy" in p.opts)
    assert opt.help.endswith(f"[choices: {', '.join(STRATEGIES)}]") and "care" in STRATEGIES


@dataclass
class Toy:
    mode: str = field(default="a", metadata={"help": "how", "choices": ("a", "bb")})
    later: str = field(default="x", metadata={"help": "named late", "choices": lambda: ("x", "y")})

    def __post_init__(self):
        if self.mode not in ("a", "bb"):
            raise ValueError(f"--mode must be one of a, bb, not {self.mode!r}")


def test_choices_are_shown_but_the_configs_own_check_decides():
    toy = typer.Typer()
    seen = []

    @config_command(toy, "go", Toy, errors=(ValueError,))
    def go(cfg: Toy, data_root=None):
        seen.append(cfg)

    @toy.command("other")
    def other():  # a second command, so "go" stays a subcommand
        pass

    res = runner.invoke(toy, ["go", "--help"], env={"COLUMNS": "200"})
    assert "[choices: a, bb]" in res.output and "[choices: x, y]" in res.output
    res = runner.invoke(toy, ["go", "--mode", "bb"])
    assert res.exit_code == 0 and seen[-1].mode == "bb"
    res = runner.invoke(toy, ["go", "--mode", "c"])
    assert res.exit_code == 2 and "--mode must be one of a, bb, not 'c'" in res.output
    props = json_schema(Toy)["properties"]
    assert props["mode"]["description"] == "how [choices: a, bb]" and props["later"]["description"].endswith("[choices: x, y]")


@pytest.mark.parametrize("path, options", [
    (("train", "sft"), ("--dataset", "--out")), (("train", "grpo"), ("--dataset", "--out")), (("train", "eval"), ("--dataset",)),
    (("acquire-labels",), ("--dataset",)), (("selfplay", "run"), ("--dataset",)), (("corpus", "questions"), ("--dataset",)),
    (("corpus", "world"), ("--dataset",)),
])
def test_options_a_command_cannot_run_without_are_marked_required(path, options):
    cmd = dict(ALL)[path]
    marked = {p.opts[0] for p in cmd.params if p.param_type_name == "option" and p.help.endswith("[required]")}
    assert marked == set(options), marked
    res = runner.invoke(app, [*path], env={"COLUMNS": "200"})  # and without them it stops at once, saying so
    assert res.exit_code == 2 and (" is required" in res.output or " are required" in res.output), res.output


def test_the_loop_config_schema_does_not_call_the_fields_it_wires_required():
    import json

    from flows.config_reference import schema

    text = json.dumps(schema())
    assert "[required]" not in text and "[choices: facts, brief, evidence, plan]" in text


def test_every_command_names_the_dataset_it_reads_dataset():
    """One name per concept: `--dataset` in every command (train, eval and export said `--data`)."""
    old = [" ".join(p) for p, cmd in ALL for o in cmd.params
           if o.param_type_name == "option" and "--data" in o.opts and not o.hidden]
    assert not old
    for path in (("train", "sft"), ("train", "grpo"), ("train", "eval"), ("export", "verl"), ("export", "trl")):
        assert any("--dataset" in o.opts for o in dict(ALL)[path].params), path


def test_out_is_a_path_and_out_dataset_the_dataset_a_command_writes_besides_its_own():
    """One name per concept: `--out` is a file or folder everywhere (corpus and validate used it
    for a dataset); a second dataset a command writes is `--out-dataset`."""
    for path, cmd in ALL:
        for o in cmd.params:
            if o.param_type_name == "option" and "--out" in o.opts and not o.hidden:
                assert not o.help.lower().startswith("dataset"), (path, o.help)
    writers = {path for path, cmd in ALL for o in cmd.params if "--out-dataset" in getattr(o, "opts", ())}
    assert writers == {("validate",), ("acquire-labels",), ("selfplay",), ("selfplay", "run"), ("selfplay", "warmstart"),
                       ("train", "grpo")}  # `forgeplay selfplay` alone is `selfplay run`


def test_an_option_two_commands_share_has_one_default():
    """`pipeline` runs synthesis: its options that `synthesize` also has default alike (they
    said --n 16 and 500, --chunk 16 and 32)."""
    def defaults(path):
        return {o.opts[0]: o.default for o in dict(ALL)[path].params if o.param_type_name == "option"}

    pipeline, synthesize = defaults(("pipeline",)), defaults(("synthesize",))
    shared = pipeline.keys() & synthesize.keys()
    assert {"--n", "--chunk", "--max-think-tokens", "--seed", "--texts"} <= shared
    assert {o: pipeline[o] for o in shared} == {o: synthesize[o] for o in shared}


@pytest.mark.parametrize("args, old, new, says", [
    (["train", "sft", "--data", "nope", "--out", "x"], "--data", "--dataset", "--dataset 'nope' has no trajectories rows"),
    (["train", "eval", "--data", "nope"], "--data", "--dataset", "--dataset 'nope' has no triples rows"),
    (["export", "verl", "--data", "nope", "--out", "x"], "--data", "--dataset", "--dataset 'nope' has no"),
    (["acquire-labels", "--dataset", "w", "--backend", "nope"], "--backend", "--rollout-backend", "unknown --rollout-backend 'nope'"),
    (["train", "eval", "--dataset", "w", "--backend", "nope"], "--backend", "--rollout-backend", "train eval failed: --dataset"),
    (["corpus", "world", "--out", "w", "--entities", "1"], "--out", "--dataset", "--entities must be at least"),
    (["validate", "--dataset", "nope", "--out", "v"], "--out", "--out-dataset", "--dataset 'nope' has no trajectories rows"),
    (["acquire-labels", "--dataset", "nope", "--p", "0.5"], "--p", "--label-p", "--dataset 'nope' has no triples rows"),
    (["train", "eval", "--dataset", "nope", "--rollout-url", "http://127.0.0.1:9"], "--rollout-url", "--base-url",
     "--dataset 'nope' has no triples rows"),
    (["selfplay", "run", "--dataset", "nope", "--rollout-url", "http://127.0.0.1:9"], "--rollout-url", "--base-url",
     "--checkpoints DIR is required"),
])
def test_an_old_spelling_still_works_with_a_one_line_note(args, old, new, says, tmp_path):
    """Renamed options (one name per concept): the old spelling `old` works, says so once, and
    is refused beside the new one."""
    res = runner.invoke(app, [*args, "--data-root", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and says in res.output, res.output
    assert res.output.count(f"note: {old} is deprecated; use {new}") == 1, res.output
    value = args[args.index(old) + 1]
    both = runner.invoke(app, [*args, new, value, "--data-root", str(tmp_path)], env={"COLUMNS": "200"})
    assert both.exit_code == 2 and "not both" in both.output, both.output
