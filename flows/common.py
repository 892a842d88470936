"""Helpers every flow uses: `Stages` (storage/runs.py: times each stage of a flow and counts
its rows in and out) and the end-of-flow artifacts it publishes: a markdown report under
`key` and a table under `key-table` (a row per stage with its rows in and out, seconds and
notes, then a row per count such as a reject reason), which the Prefect client reads back.
Run records (a run's resolved config and its hash, which names the run) are storage/runs.py
too. (Prefect's defaults for running with no server are set in flows/__init__.py, before
prefect is imported; whether a flow runs as a Prefect flow run at all is flows/engine.py's.)

    stages = Stages()
    with stages.stage("load") as st:
        rows = load(...)
        st.rows_out = len(rows)
    stages.publish("synthesize-report", "synthesize demo", {"case": {...}})
"""

from __future__ import annotations

import gc
import logging
import re
from contextlib import contextmanager

from flows.engine import in_prefect_run
from storage import lifeline, runs


_tied: set[int] = set()


class BadInputOnce(logging.Filter):
    """Keeps the flow engine's console report of an exception that is bad input
    (storage.configcli.USER_ERRORS: the command line prints it as one line, "validate
    failed: ...", and a Python caller gets the exception) off the console: it printed the
    message a second time with a traceback. The run's log on the Prefect server keeps it."""

    def filter(self, record: logging.LogRecord) -> bool:
        from storage.configcli import USER_ERRORS

        return not (record.exc_info and isinstance(record.exc_info[1], USER_ERRORS))


def quiet_bad_input() -> None:
    """Put BadInputOnce on Prefect's console handlers (once)."""
    from prefect.logging.handlers import PrefectConsoleHandler

    for handler in logging.getLogger().handlers + logging.getLogger("prefect").handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(isinstance(f, BadInputOnce) for f in handler.filters):
            handler.addFilter(BadInputOnce())


def tie_temporary_server() -> None:
    """Tie the temporary Prefect server this process started (no PREFECT_API_URL set) to this
    process (storage/lifeline.py), so it ends with it even when the kernel kills the flow
    process; called first in every flow (the server starts before a flow's body runs). Does
    nothing with a configured server, when the server is already tied, and in a local run
    (flows/engine.py: no Prefect flow run, no server). Also keeps bad input from being
    reported twice on the console (`quiet_bad_input`)."""
    if not in_prefect_run():
        return
    from prefect.server.api.server import SubprocessASGIServer

    quiet_bad_input()
    server = SubprocessASGIServer._instances.get(None)
    proc = getattr(server, "server_process", None)
    if proc is not None and proc.poll() is None and proc.pid not in _tied:
        lifeline.tie(proc.pid)
        _tied.add(proc.pid)


@contextmanager
def set_aside():
    """A flow's body, whose set-up (`setup(...)` below) builds what lives to its end: the
    corpus, the plans, an index and their caches. The set-up runs with no cyclic-collector pass
    (none of it is garbage), and what is alive then is set aside from the passes after it
    (gc.freeze), which would walk it again and again; on exit it is handed back (gc.unfreeze),
    so a process that runs many flows keeps none of it longer than before.

        with set_aside() as setup:
            p = setup(prepare, cfg, ...)
            ...
    """
    def setup(fn, *args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.freeze()
            if was:
                gc.enable()

    try:
        yield setup
    finally:
        gc.unfreeze()


def require_world(root, dataset: str, option: str = "--dataset") -> None:
    """A dataset with documents and triples (a world or an imported corpus: what synthesis,
    self-play and label acquisition read), checked before a flow starts; a one-line
    ValueError that says how to make one."""
    from storage.reader import require_rows

    for kind in ("triples", "documents"):
        try:
            require_rows(root, dataset, kind, option)
        except ValueError as e:
            raise ValueError(f"{e}; {option} needs documents and triples: build them with `forgeplay corpus "
                             f"world --dataset {dataset}` or `forgeplay corpus import FILE --dataset {dataset}`") from None


class Stages(runs.Stages):
    """storage.runs.Stages that also publishes itself as the flow's artifacts."""

    def publish(self, key: str, title: str, counts: dict[str, dict] | None = None) -> str:
        return publish_artifact(key, title, self.as_dicts(), counts)


def artifact_key(key: str) -> str:
    """A Prefect artifact key: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-")


def stage_table(stages: list[dict]) -> str:
    """A markdown table of stages: name, rows in, rows out, seconds, notes."""
    lines = ["| stage | rows in | rows out | seconds | notes |", "|---|---:|---:|---:|---|"]
    for s in stages:
        lines.append(f"| {s['stage']} | {s.get('rows_in', '')} | {s.get('rows_out', '')} | "
                     f"{s.get('seconds', 0):.2f} | {s.get('notes', '')} |")
    return "\n".join(lines)


def table_rows(stages: list[dict], counts: dict[str, dict] | None = None) -> list[dict]:
    """The rows of the table artifact, all with the same columns: per stage (`section`
    "stage") its rows in and out, seconds and notes; per count (`section` the count's name,
    e.g. "rejects by layer/reason") the value as `name` and its `count`, largest first."""
    rows = [{"section": "stage", "name": s["stage"], "rows_in": s.get("rows_in"), "rows_out": s.get("rows_out"),
             "seconds": round(s.get("seconds", 0.0), 3), "count": None, "notes": s.get("notes", "")}
            for s in stages]
    for section, table in (counts or {}).items():
        rows += [{"section": section, "name": str(k), "rows_in": None, "rows_out": None, "seconds": None,
                  "count": v, "notes": ""} for k, v in sorted(table.items(), key=lambda kv: -kv[1])]
    return rows


def publish_artifact(key: str, title: str, stages: list[dict], counts: dict[str, dict] | None = None) -> str:
    """End-of-flow Prefect artifacts: rows in and out per stage, counts (e.g. reject reasons,
    case mix) and timing, as markdown (key `key`) and as a table (key `key-table`). Returns
    the markdown (also when no Prefect run is active)."""
    md = [f"# {title}", "", stage_table(stages)]
    for name, table in (counts or {}).items():
        md += ["", f"## {name}", "", "| value | count |", "|---|---:|"]
        md += [f"| {k} | {v} |" for k, v in sorted(table.items(), key=lambda kv: -kv[1])]
    text = "\n".join(md)
    if not in_prefect_run():  # a local run (flows/engine.py) publishes nothing
        return text
    try:
        from prefect.artifacts import create_markdown_artifact, create_table_artifact

        create_markdown_artifact(markdown=text, key=artifact_key(key), description=title)
        create_table_artifact(table_rows(stages, counts), key=artifact_key(f"{key}-table"), description=title)
    except Exception as e:  # an artifact is a report; never fail a flow over it
        logging.getLogger(__name__).warning("artifact %s not published: %s: %s", key, type(e).__name__, e)
    return text
