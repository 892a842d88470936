"""Typed configs on the command line: Typer commands built from config dataclasses (every
field an option, its `metadata["help"]` the help text, so the CLI and the saved config never
drift apart), and the way back, a config instance as the options that rebuild it (how a
launcher passes configs to the processes it starts), and a JSON Schema of the fields, how a
file naming options is checked (`json_schema`). Both `forgeplay` (flows/) and `python -m
train` build their commands here.

    @config_command(app, "synthesize", SynthConfig, BackendConfig)
    def synthesize(synth: SynthConfig, backend: BackendConfig, data_root: Path | None) -> None: ...
    to_args(SynthConfig(dataset="demo"))     # ["--dataset", "demo", "--n", "100", ...]

Scalar fields (str, int, float, bool and their Optional forms) map to options of that type;
dict and list fields take JSON text. A field whose values are a closed set names it in
`metadata["choices"]` (the names, or a function returning them, such as a registry's keys):
`--help` lists them after the option's help (`[choices: full, compact]`, beside typer's
`[default: full]`; a metavar column would cut a long list); the config's own checks still
decide what is valid, so their messages stay the same in a command and in a file. A field a
command cannot run without says `metadata["required"] = True`: its help ends in
`[required]` (the loop config's schema leaves that out: the loop sets those fields itself).
A field whose option is named otherwise than the field says so in `metadata["flag"]` (the
`data` field of the training configs is `--dataset`, as in every other command; config
files keep the field's name), and its old spellings in `metadata["aliases"]`: they still
work, hidden from `--help`, with a one-line deprecation note.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence

import typer
from rich.console import Console
from rich.markup import escape

SCALARS = (str, int, float, bool)
USER_ERRORS = (ValueError, KeyError, FileNotFoundError)  # bad input: a readable message, exit 2
_err = Console(stderr=True)

def fail(message: str, label: str = "error") -> None:
    """Print `label: message` in red on stderr (the message as plain text) and exit with 2:
    how a command refuses bad input."""
    _err.print(f"[red]{label}:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


DataRoot = Annotated[
    Optional[Path],
    typer.Option("--data-root", envvar="FORGEPLAY_DATA", show_envvar=True,
                 help="Root folder of all datasets (default: $FORGEPLAY_DATA, else ./data)."),
]


def _option_type(tp) -> tuple[Any, bool]:
    """(type typer sees, whether the value is JSON text to decode)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner, is_json = _option_type(args[0]) if len(args) == 1 else (str, True)
        return Optional[inner], is_json
    if tp in SCALARS:
        return tp, False
    return str, True


def choices(f: dataclasses.Field) -> tuple[str, ...]:
    """The names a field's `metadata["choices"]` gives (module docstring); () if none."""
    named = f.metadata.get("choices", ())
    return tuple(named() if callable(named) else named)


def _choices_note(f: dataclasses.Field) -> str:
    named = choices(f)
    return f" [choices: {', '.join(named)}]" if named else ""


def _help(f: dataclasses.Field, is_json: bool) -> str:
    note = _choices_note(f) + (" [required]" if f.metadata.get("required") else "")
    return f.metadata.get("help", "") + (" (JSON)" if is_json else "") + escape(note)  # not a markup tag


def flag(f: dataclasses.Field) -> str:
    """The option of a field: `metadata["flag"]`, else its name, as --kebab-case."""
    return "--" + f.metadata.get("flag", f.name).replace("_", "-")


def old_spelling(value, old_value, option: str, old: str, default=None):
    """An option's value when it may come under its old spelling `old` (module docstring):
    `old_value` with a one-line deprecation note, refused beside a `value` given as `option`;
    else `value`."""
    if old_value is None:
        return value
    if value != default:
        raise typer.BadParameter(f"give {option} or its old spelling {old}, not both")
    _err.print(f"note: {old} is deprecated; use {option}", highlight=False)
    return old_value


def option_of(cfg, name: str) -> str:
    """The option of `cfg`'s field `name` (an instance or a dataclass), for messages."""
    return flag(next(f for f in dataclasses.fields(cfg) if f.name == name))


def _fields(cls) -> list[dataclasses.Field]:
    """`cls`'s fields with their types resolved, its own first, then those of each base in
    method resolution order (a config that extends a shared one, e.g. LabelConfig, lists
    what it is about before what it shares)."""
    hints = typing.get_type_hints(cls)
    owner = {}
    for depth, base in enumerate(cls.__mro__):
        for name in base.__dict__.get("__annotations__", {}):
            owner.setdefault(name, depth)
    out = []
    for f in dataclasses.fields(cls):
        f.type = hints[f.name]
        out.append(f)
    return sorted(out, key=lambda f: owner.get(f.name, 0))


def config_command(app: typer.Typer, name: str, *classes, help: str | None = None,
                   errors: tuple[type[BaseException], ...] = (), label: str | None = None,
                   group_default: bool = False):
    """Decorator: register `fn(*instances, data_root=...)` as command `name` whose options
    are the fields of `classes` (each field name must be unique across them). Exceptions of
    the types in `errors` (bad input the user can fix) print "<label> failed: ..." on stderr
    and exit with code 2 instead of a traceback. With `group_default` the command is also
    what the group `app` runs when it is given options and no subcommand
    (`forgeplay selfplay --dataset D` as `forgeplay selfplay run --dataset D`)."""

    def wrap(fn: Callable) -> Callable:
        params, owners, decoders, aliases = [], {}, {}, {}
        for cls in classes:
            for f in _fields(cls):
                if f.name in owners:
                    raise ValueError(f"field {f.name} appears in two configs")
                owners[f.name] = cls
                tp, is_json = _option_type(f.type)
                if is_json:
                    decoders[f.name] = True
                if f.default is not dataclasses.MISSING:
                    default = f.default
                else:
                    default = f.default_factory()  # type: ignore[misc]
                if is_json and default is not None and not isinstance(default, str):
                    default = json.dumps(default)
                option = flag(f)
                decls = [option] if tp not in (bool, Optional[bool]) else [f"{option}/--no-{option[2:]}"]
                opt = typer.Option(*decls, help=_help(f, is_json))
                params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                                annotation=Annotated[tp, opt]))
                for i, old in enumerate(f.metadata.get("aliases", ())):  # an old spelling: hidden, noted when used
                    key = f"_alias_{i}_{f.name}"
                    aliases[key] = (f.name, f"--{old}", option, default)
                    params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
                        Optional[tp], typer.Option(f"--{old}", hidden=True, help=f"deprecated: use {option}")]))
        params.append(inspect.Parameter("data_root", inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=DataRoot))

        def command(**kwargs):
            data_root: Optional[Path] = kwargs.pop("data_root", None)
            for key, (field_name, old, option, default) in aliases.items():
                kwargs[field_name] = old_spelling(kwargs[field_name], kwargs.pop(key), option, old, default)
            built = []
            for cls in classes:
                values = {}
                for f in _fields(cls):
                    v = kwargs[f.name]
                    if f.name in decoders and isinstance(v, str):
                        try:
                            v = json.loads(v)
                        except ValueError as e:
                            raise typer.BadParameter(f"{flag(f)} must be JSON: {e}") from None
                    values[f.name] = v
                built.append(values)
            try:  # a config's own checks (__post_init__) are user errors too
                built = [cls(**values) for cls, values in zip(classes, built)]
                return fn(*built, data_root=data_root)
            except errors as e:
                fail(str(e), f"{label or name} failed")

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__doc__ = " ".join((help or fn.__doc__ or "").split())  # one paragraph in --help
        command.__name__ = fn.__name__
        app.command(name)(command)
        if group_default:
            def default(ctx: typer.Context, **kwargs):
                if ctx.invoked_subcommand is None:
                    return command(**kwargs)

            ctx_param = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
            default.__signature__ = inspect.Signature([ctx_param, *params])  # type: ignore[attr-defined]
            default.__doc__ = command.__doc__
            app.callback(invoke_without_command=True)(default)
        return fn

    return wrap


def to_args(*configs, skip: Sequence[str] = ()) -> list[str]:
    """CLI options that rebuild `configs` (dataclass instances) through `config_command`
    (fields named in `skip` are left out and so take their defaults)."""
    out: list[str] = []
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            if f.name in skip:
                continue
            v, name = getattr(cfg, f.name), flag(f)
            if v is None:
                if f.default is not None:
                    raise ValueError(f"{name} cannot be given as None")
                continue
            if isinstance(v, bool):
                out.append(name if v else f"--no-{name[2:]}")
            elif isinstance(v, (dict, list)):
                out += [name, json.dumps(v)]
            else:
                out += [name, str(v)]
    return out


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array",
               type(None): "null"}


def _json_types(tp) -> list[str]:
    """JSON Schema type names of a field's type (none known: any value)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(tp) for t in _json_types(a)]
    name = _JSON_TYPES.get(typing.get_origin(tp) or tp)
    return [name] if name else []


def json_schema(*classes) -> dict:
    """A JSON Schema of an object that sets some fields of config dataclasses `classes` (no
    other keys; a value of the field's type): how a file naming options, such as the
    parameters of a `forgeplay serve` schedule, is checked before the configs are built."""
    props = {}
    for cls in classes:
        for f in _fields(cls):
            kinds = _json_types(f.type)
            props[f.name] = {"description": f.metadata.get("help", "") + _choices_note(f),
                             **({"type": kinds} if kinds else {})}
    return {"type": "object", "properties": props, "additionalProperties": False}
