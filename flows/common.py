"""Helpers every flow uses: `Stages` (storage/runs.py: times each stage of a flow and counts
its rows in and out) and the end-of-flow artifact it publishes (that table plus counts such
as reject reasons). Run records (a run's resolved config and its hash, which names the run)
are storage/runs.py too. (Prefect's defaults for running with no server are set in
flows/__init__.py, before prefect is imported.)

    stages = Stages()
    with stages.stage("load") as st:
        rows = load(...)
        st.rows_out = len(rows)
    stages.publish("synthesize-report", "synthesize demo", {"case": {...}})
"""

from __future__ import annotations

from storage import runs


class Stages(runs.Stages):
    """storage.runs.Stages that also publishes itself as the flow's artifact."""

    def publish(self, key: str, title: str, counts: dict[str, dict] | None = None) -> str:
        return publish_artifact(key, title, self.as_dicts(), counts)


def stage_table(stages: list[dict]) -> str:
    """A markdown table of stages: name, rows in, rows out, seconds, notes."""
    lines = ["| stage | rows in | rows out | seconds | notes |", "|---|---:|---:|---:|---|"]
    for s in stages:
        lines.append(f"| {s['stage']} | {s.get('rows_in', '')} | {s.get('rows_out', '')} | "
                     f"{s.get('seconds', 0):.2f} | {s.get('notes', '')} |")
    return "\n".join(lines)


def publish_artifact(key: str, title: str, stages: list[dict], counts: dict[str, dict] | None = None) -> str:
    """End-of-flow Prefect artifact: rows in and out per stage, counts (e.g. reject reasons,
    case mix) and timing. Returns the markdown (also when no Prefect run is active)."""
    md = [f"# {title}", "", stage_table(stages)]
    for name, table in (counts or {}).items():
        md += ["", f"## {name}", "", "| value | count |", "|---|---:|"]
        md += [f"| {k} | {v} |" for k, v in sorted(table.items(), key=lambda kv: -kv[1])]
    text = "\n".join(md)
    try:
        from prefect.artifacts import create_markdown_artifact
        from prefect.context import FlowRunContext

        if FlowRunContext.get() is not None:
            create_markdown_artifact(markdown=text, key=key.lower().replace("_", "-"), description=title)
    except Exception:  # an artifact is a report; never fail a flow over it
        pass
    return text
