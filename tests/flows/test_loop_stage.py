"""A loop stage is one runner plus one entry of `STAGES` (flows/loop_stages.py): a toy stage, declared
here in one place (its config section, defaults, wiring, runner, servable flow and report
section), gets its section in the loop config's schema, checks and reference page, is offered
to `forgeplay serve`, runs in the loop in its place between the built-in stages, and its
section is on the run's report."""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pytest

from flows import config_reference, loop_config, loop_stages, schedules
from flows.engine import flow
from flows.loop_stages import ConfigSection, Servable, Stage
from reports import Part
from reports.html import Section, Table
from storage import Catalog
from storage.catalog import view_name
from storage.configfile import ConfigFileError
from storage.loop_runs import read
from tests.reports.test_report import Page


@dataclass(frozen=True)
class CountConfig:
    dataset: str = field(default="", metadata={"help": "the world dataset whose triples are counted"})
    hops: int = field(default=2, metadata={"help": "count the triples of this many hops"})

    def check(self) -> None:
        if self.hops < 1:
            raise ValueError(f"hops must be at least 1, not {self.hops}")


def count_runner(loop):
    (cfg,) = loop.configs("count")
    with Catalog(loop.root) as cat:
        (total, hops), = cat.rows(f'SELECT count(*), count(*) FILTER (WHERE hop_count = ?) FROM '
                                  f'"{view_name(cfg.dataset, "triples")}"', [cfg.hops])
    return {"triples": total, "with_hops": hops}, total, hops, f"{hops} of {total} triples have {cfg.hops} hops"


def count_section(ctx) -> Section:
    s = ctx.summary("count")
    return Section(tables=[Table(["triples", "with the hops asked"], [[s["triples"], s["with_hops"]]], "count")])


@flow(name="count")
def count_flow(config: dict, data_root: str | None = None) -> dict:
    return config


COUNT = Stage("count", ConfigSection("count", (CountConfig,), {"hops": 3}, "the toy counter of this test",
                                     wire=lambda w: {"dataset": w.dataset}),
              count_runner, {"count": Servable(f"{__name__}:count_flow", (CountConfig,), ("config",))},
              (Part("count", "Counted triples", count_section),))


@pytest.fixture
def with_count(monkeypatch):
    """The built-in stages with the toy one after the corpus."""
    monkeypatch.setattr(loop_stages, "STAGES", loop_stages.STAGES[:1] + (COUNT,) + loop_stages.STAGES[1:])


def test_the_toy_stage_gets_its_section_in_the_schema_checks_and_reference(with_count):
    assert loop_stages.stage_names()[:3] == ("corpus", "count", "synthesize")
    props = loop_config.file_schema()["properties"]
    assert set(props["count"]["properties"]) == {"hops"}  # dataset is wired
    assert "count" in props["skip"]["items"]["enum"]
    config = loop_config.check({"count": {"hops": 1}})
    assert config["count"] == {"hops": 1} and loop_config.check({})["count"] == {"hops": 3}
    with pytest.raises(ConfigFileError, match="count: hops must be at least 1, not 0"):
        loop_config.check({"count": {"hops": 0}})
    with pytest.raises(ConfigFileError, match="corpus: need at least 50 entities, got 40"):
        loop_config.check({"corpus": {"entities": 40}})  # a built-in section's own check, too
    with pytest.raises(ConfigFileError, match=r"count\.dataset: .*set by the loop \(it wires dataset"):
        loop_config.check({"count": {"dataset": "other"}})
    page = config_reference.markdown()
    assert "## `count`" in page and "the toy counter of this test" in page and "corpus, count, synthesize" in page
    assert "count" in schedules.servable()
    (entry,) = schedules.parse({"schedules": [{"flow": "count", "name": "hourly", "interval": 3600,
                                               "parameters": {"dataset": "w", "hops": 2}}]})
    assert entry.configs == [CountConfig("w", 2)]


def test_the_toy_stage_runs_in_the_loop_and_its_section_is_on_the_report(with_count, tmp_path):
    from flows.run import run

    others = [n for n in loop_stages.stage_names() if n not in ("corpus", "count")]
    config = loop_config.check({"dataset": "w", "corpus": {"entities": 60}, "skip": others})
    record = run(config, tmp_path, progress=False)
    assert list(record["stages"]) == ["corpus", "count"]
    done = record["stages"]["count"]
    with duckdb.connect() as con:  # the shards themselves, beside the catalog the runner read
        total, hops = con.execute(f"SELECT count(*), count(*) FILTER (WHERE hop_count = 3) FROM "
                                  f"read_parquet('{tmp_path}/w/triples/*/*.parquet')").fetchone()
    assert total > 0 and done["summary"] == {"triples": total, "with_hops": hops}
    assert (done["rows_in"], done["rows_out"]) == (total, hops)
    assert read(tmp_path, record["run_id"])["stages"]["count"]["status"] == "done"
    page = Page((tmp_path / "runs" / record["run_id"] / "report.html").read_text())
    assert list(page.sections)[:2] == ["stages", "count"]
    assert page.sections["count"]["tables"]["count"] == [[str(total), str(hops)]]
    assert [r[0] for r in page.sections["stages"]["tables"]["stages"]] == ["corpus", "count"]
