"""What a report section reads: the loop run's record and, on demand, a DuckDB catalog over the
data root. A missing piece raises `Absent` with what is missing, which the report shows as
the section's one-line "not in this run" note.

    ctx = RunContext(root, "run-3f2a", loop_runs.read(root, "run-3f2a"))
    ctx.summary("validate")["funnel"]; ctx.dataset("world"); ctx.view("demo", "trajectories")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from storage import Catalog
from storage.catalog import view_name


class Absent(Exception):
    """The run has no data for a section; the message says which."""


@dataclass
class RunContext:
    root: Path
    run_id: str
    record: dict
    tokenizer: str | None = None  # a tokenizer or model folder; None: the run's base model, else the embedded one
    _catalog: Catalog | None = field(default=None, repr=False)

    def stage(self, name: str) -> dict:
        stage = (self.record.get("stages") or {}).get(name)
        if not isinstance(stage, dict):
            raise Absent(f"no {name} stage")
        return stage

    def summary(self, name: str) -> dict:
        summary = self.stage(name).get("summary")
        if not isinstance(summary, dict):
            raise Absent(f"the {name} stage has no summary")
        return summary

    def run_of(self, name: str) -> str | None:
        """The run id a stage's flow wrote its rows under, when its summary names one."""
        try:
            return self.summary(name).get("run_id")
        except Absent:
            return None

    def dataset(self, role: str) -> str:
        name = (self.record.get("datasets") or {}).get(role)
        if not name:
            raise Absent(f"no {role} dataset")
        return name

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = Catalog(self.root)
        return self._catalog

    def view(self, dataset: str, kind: str) -> str:
        """The quoted DuckDB view of (dataset, kind)."""
        name = view_name(dataset, kind)
        if name not in self.catalog.views:
            raise Absent(f"no {kind} in dataset {dataset!r}")
        return f'"{name}"'

    def path(self, value: str) -> Path:
        """A path the record holds: as written when it exists, else under the data root."""
        p = Path(value)
        return p if p.is_absolute() or p.exists() else self.root / p

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None
