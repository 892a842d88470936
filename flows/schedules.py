"""The schedules file of `forgeplay serve`: which flows run when, with which parameters.

    schedules:
      - flow: validate            # synthesize, validate, selfplay, selfplay-warmstart, acquire-labels, pipeline
        name: nightly             # the deployment's name (unique per flow)
        cron: "0 2 * * *"         # or interval: 3600 (seconds); optional timezone: Europe/Paris
        parameters:               # the command's options, without dashes: forgeplay validate --help
          dataset: demo
          layers: schema,rules,dedup

A file is checked whole before anything is served (the file's JSON Schema is built from the
flows' config dataclasses, storage/configcli.py), and a malformed one is one error line
naming the field: `schedules.yaml: schedules[1].cron: Invalid cron string: "61 * * * *"`.
Unset parameters take the command's defaults; every deployment gets the full config, so the
Prefect UI shows what a run will use. A loop stage declares the flows it can be scheduled as
(flows/loop_stages.py `Servable`); `servable()` lists them, with `pipeline`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from flows import loop_stages
from flows.configs import PipelineConfig
from flows.loop_stages import Servable
from generators.llm.registry import BackendConfig
from storage import configfile
from storage.configcli import json_schema


def servable() -> dict[str, Servable]:
    """The flows `forgeplay serve` schedules: those the loop's stages declare (flows/loop_stages.py),
    then `pipeline`."""
    return {**loop_stages.servables(),
            "pipeline": Servable("flows.pipeline:pipeline_flow", (PipelineConfig, BackendConfig), ("config", "backend"))}


class ScheduleError(ValueError):
    """A malformed schedules file; the message is one line naming the file and the field."""


def file_schema() -> dict:
    """The JSON Schema of a schedules file; each flow's parameters are its configs' fields."""
    entry = {
        "type": "object", "required": ["flow", "name"], "additionalProperties": False,
        "properties": {
            "flow": {"enum": list(servable())},
            "name": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9 _.-]*$"},
            "cron": {"type": "string"},
            "interval": {"type": "number", "exclusiveMinimum": 0},
            "timezone": {"type": "string"},
            "description": {"type": "string"},
            "parameters": {"type": "object"},
        },
        "allOf": [{"if": {"properties": {"flow": {"const": name}}, "required": ["flow"]},
                   "then": {"properties": {"parameters": json_schema(*s.configs)}}} for name, s in servable().items()],
    }
    return {"type": "object", "required": ["schedules"], "additionalProperties": False,
            "properties": {"schedules": {"type": "array", "minItems": 1, "items": entry}}}


@dataclass
class Schedule:
    """One entry of the file, its parameters built into the flow's configs."""

    flow: str
    name: str
    configs: list
    cron: str | None = None
    interval: float | None = None
    timezone: str | None = None
    description: str | None = None

    def parameters(self, root: Path) -> dict:
        """The flow's parameters: each config as a dict, and the data root."""
        params = {p: dataclasses.asdict(c) for p, c in zip(servable()[self.flow].params, self.configs)}
        params["data_root"] = str(root)
        return params

    def options(self, root: Path) -> dict:
        """Prefect's `Runner.add_flow` arguments of this schedule: the deployment's name,
        schedule, parameters and description, and at most one run at a time (a run due while
        the previous one still runs is cancelled, not queued: queued runs would pile up)."""
        import inspect

        from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
        from prefect.schedules import Cron, Interval

        flow = servable()[self.flow].flow(self.configs)
        params = self.parameters(root)
        if "progress" in inspect.signature(flow.fn).parameters:
            params["progress"] = False
        return {"flow": flow, "name": self.name, "parameters": params, "description": self.description,
                "schedule": (Cron(self.cron, timezone=self.timezone) if self.cron
                             else Interval(dt.timedelta(seconds=self.interval), timezone=self.timezone)),
                "concurrency_limit": ConcurrencyLimitConfig(limit=1,
                                                            collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW)}


def _unknown(doc) -> Callable[[list, str], str | None]:
    """How an unknown parameter of a schedule is worded: the command whose options it takes."""
    def word(path: list, field: str) -> str | None:
        if path and path[-1] == "parameters":
            flow = doc["schedules"][path[1]]["flow"]
            command = servable()[flow].command or flow
            return f"not a parameter of {flow} (the options of `forgeplay {command} --help`, without dashes)"
        return None
    return word


def _check_when(entry: dict, at: str) -> None:
    """Exactly one of cron and interval, and a cron string and timezone Prefect accepts."""
    if "cron" in entry and "interval" in entry:
        raise ScheduleError(f"{at}.interval: give cron or interval, not both")
    if "cron" not in entry and "interval" not in entry:
        raise ScheduleError(f"{at}: give cron (a cron string) or interval (seconds)")
    from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule
    from pydantic import ValidationError

    try:
        if "cron" in entry:
            CronSchedule(cron=entry["cron"], timezone=entry.get("timezone"))
        else:
            IntervalSchedule(interval=dt.timedelta(seconds=entry["interval"]), timezone=entry.get("timezone"))
    except ValidationError as e:
        first = e.errors()[0]
        field = first["loc"][0] if first["loc"] else "timezone"
        raise ScheduleError(f"{at}.{field}: {first['msg'].removeprefix('Value error, ')}") from None


def _configs(entry: dict, at: str) -> list:
    """The flow's config instances from the entry's parameters (their own checks included)."""
    params, target = entry.get("parameters") or {}, servable()[entry["flow"]]
    try:
        out = [cls(**{k: v for k, v in params.items() if k in {f.name for f in dataclasses.fields(cls)}})
               for cls in target.configs]
        if target.check is not None:
            target.check(*out)
    except (ValueError, TypeError, KeyError) as e:
        raise ScheduleError(f"{at}.parameters: {e}") from None
    return out


def parse(doc, source: str = "schedules") -> list[Schedule]:
    """Schedules from a parsed file; ScheduleError "<source>: <field>: <what is wrong>"."""
    try:
        if doc is None:
            raise ScheduleError("(top level): the file is empty; it needs a `schedules` list")
        try:
            configfile.check(doc, file_schema(), _unknown(doc))
        except configfile.ConfigFileError as e:
            raise ScheduleError(str(e)) from None
        seen: dict[tuple[str, str], int] = {}
        out = []
        for i, entry in enumerate(doc["schedules"]):
            at = f"schedules[{i}]"
            key = (entry["flow"], entry["name"])
            if key in seen:
                raise ScheduleError(f"{at}.name: {entry['name']!r} is already the name of schedules[{seen[key]}] "
                                    f"(names are unique per flow)")
            seen[key] = i
            _check_when(entry, at)
            out.append(Schedule(entry["flow"], entry["name"], _configs(entry, at), entry.get("cron"),
                                entry.get("interval"), entry.get("timezone"), entry.get("description")))
        return out
    except ScheduleError as e:
        raise ScheduleError(f"{source}: {e}".replace("\n", " ")) from None


def load(path: str | Path) -> list[Schedule]:
    """Read and check a schedules file (YAML or JSON); ScheduleError naming the field."""
    try:
        doc = configfile.read(path)
    except configfile.ConfigFileError as e:
        raise ScheduleError(str(e)) from None
    return parse(doc, str(path))
