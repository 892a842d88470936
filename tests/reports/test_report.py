"""`forgeplay report` over a real small loop run (tests/reports/conftest.py): every section is
there, every plot is an embedded PNG that decodes, the page loads nothing from elsewhere, and
the tables hold the run's numbers (funnel, self-play solve rates, label spend, mixes); a run
with parts missing renders its notes; an unknown run is a one-line error naming the runs."""

from __future__ import annotations

import base64
import io
from collections import Counter
from html.parser import HTMLParser

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from flows.loop_stages import report_parts
from reports import write_report
from tests.reports.conftest import ATTEMPTS, BOUGHT, BROKEN, RUN


TABLES_ONLY = ("shards",)  # sections without a plot


class Page(HTMLParser):
    """Sections by id: their images, tables (rows of cell texts) and absent notes; every
    script and every reference to another resource."""

    def __init__(self, text: str):
        super().__init__()
        self.sections, self.scripts, self.external = {}, 0, []
        self._section = self._table = self._row = self._cell = self._absent = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            if key in a and not a[key].startswith("data:"):
                self.external.append(a[key])
        if tag == "section":
            self._section = self.sections.setdefault(a["id"], {"images": [], "tables": {}, "absent": ""})
        elif tag == "img":
            self._section["images"].append(a["src"])
        elif tag == "table":
            self._table = self._section["tables"].setdefault(a["id"].removeprefix("table-"), [])
        elif tag == "tr":
            self._row = []
        elif tag == "td":
            self._cell = ""
        elif tag == "p" and a.get("class") == "absent":
            self._absent = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._absent is not None:
            self._absent += data

    def handle_endtag(self, tag):
        if tag == "td":
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row:
            self._table.append(self._row)
            self._row = None
        elif tag == "p" and self._absent is not None:
            self._section["absent"], self._absent = self._absent, None


def decode_png(src: str) -> Image.Image:
    head, data = src.split(",", 1)
    assert head == "data:image/png;base64"
    img = Image.open(io.BytesIO(base64.b64decode(data)))
    img.load()
    assert img.format == "PNG" and img.width > 100 and img.height > 100
    return img


@pytest.fixture(scope="module")
def page(loop_run, embedded_tokenizer_dir):
    root, _ = loop_run
    path = write_report(root, RUN, tokenizer=str(embedded_tokenizer_dir), parts=report_parts())
    assert path == root / "runs" / RUN / "report.html"
    return Page(path.read_text())


def test_every_section_is_rendered_with_decodable_plots_and_nothing_external(page):
    assert list(page.sections) == [p.key for p in report_parts()]
    assert {k: s["absent"] for k, s in page.sections.items() if s["absent"]} == {}
    assert page.scripts == 0 and page.external == []
    for key, s in page.sections.items():
        assert (s["images"] or key in TABLES_ONLY) and s["tables"], key
        for src in s["images"]:
            pixels = decode_png(src).convert("L").getextrema()
            assert pixels[0] < pixels[1], f"{key}: a blank plot"


def test_funnel_table_holds_the_runs_numbers(page, loop_run):
    _, record = loop_run
    summary = record["stages"]["validate"]["summary"]
    rows = page.sections["funnel"]["tables"]["funnel"]
    assert rows[0] == ["rows in", "", "", "", str(summary["rows_in"])]
    assert rows[-1] == ["accepted", "", "", "", str(summary["rows_out"])]
    shown = {(r[1], r[3]): int(r[4]) for r in rows[1:-1]}
    assert shown == {(f["layer"], f["reason"]): f["rejected"] for f in summary["funnel"] if f["rejected"]}
    assert shown[("rules", "replay_mismatch")] >= BROKEN
    assert summary["rows_out"] == summary["rows_in"] - sum(shown.values()) > 0


def test_selfplay_label_mix_and_eval_tables(page, loop_run):
    root, record = loop_run
    solve = {(int(r[0]), int(r[1])): (int(r[2]), int(r[3]), float(r[4]))
             for r in page.sections["examiner"]["tables"]["examiner"]}
    assert solve == {k: (2, 4, pytest.approx(sum(v) / 4, abs=1e-3)) for k, v in ATTEMPTS.items()}
    labels = {r[0]: (int(r[1]), float(r[2])) for r in page.sections["labels"]["tables"]["labels"]}
    assert labels == {s: (n, 1.5 * n) for s, n in BOUGHT.items()}
    from storage import load_table

    synthesized = load_table("demo", "trajectories", root).to_pylist()
    for mix, key in (("case", "case"), ("route", "route")):
        table = page.sections["mixes"]["tables"][f"mix-{mix}"]
        assert {r[0]: int(r[1]) for r in table} == Counter(t[key] for t in synthesized)
        assert sum(int(r[2]) for r in table) == record["stages"]["validate"]["summary"]["rows_out"]
    tokens = {r[0]: r[1:] for r in page.sections["tokens"]["tables"]["tokens"]}
    assert int(tokens["all"][0]) == len(synthesized) and 100 < int(tokens["all"][1]) <= int(tokens["all"][4])
    evals = {r[0]: float(r[2]) for r in page.sections["eval"]["tables"]["eval"]}
    assert evals == {stage: e["em"] for stage, e in record["eval"].items()}
    steps = {r[0]: int(r[2]) for r in page.sections["curves"]["tables"]["curves"]}
    assert steps == {"sft": 5, "grpo": 5}


def test_a_run_with_parts_missing_renders_its_notes(tmp_path):
    from storage.files import write_json

    write_json(tmp_path / "runs" / "r1" / "run.json", {
        "run_id": "r1", "status": "failed", "datasets": {"world": "nowhere"},
        "stages": {"corpus": {"status": "done", "seconds": 1.0}, "synthesize": {"status": "failed", "seconds": 0.5}},
        "eval": {"base": {"em": 0.5}}})
    page = Page(write_report(tmp_path, "r1").read_text())
    assert page.sections["stages"]["absent"] == "" and len(page.sections["stages"]["tables"]["stages"]) == 2
    assert page.sections["eval"]["absent"] == "" and page.sections["eval"]["tables"]["eval-qtype"] == []
    absent = {k: s["absent"] for k, s in page.sections.items() if s["absent"]}
    assert absent == {"funnel": "Not in this run: no validate stage.",
                      "mixes": "Not in this run: no trajectories in dataset 'nowhere'.",
                      "tokens": "Not in this run: no trajectories in dataset 'nowhere'.",
                      "curves": "Not in this run: no training run recorded.",
                      "labels": "Not in this run: no labels dataset.",
                      "examiner": "Not in this run: no selfplay dataset.",
                      "shards": "Not in this run: the run recorded no shard check."}


def test_cli_writes_the_page_and_refuses_an_unknown_run(tmp_path):
    from flows import cli_report
    from storage.files import write_json

    write_json(tmp_path / "runs" / "r2" / "run.json", {"run_id": "r2", "stages": {"corpus": {"status": "done"}}})
    app = typer.Typer()
    cli_report.register(app)
    out = tmp_path / "page.html"
    res = CliRunner().invoke(app, ["report", "r2", "--out", str(out), "--data-root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == str(out) and list(Page(out.read_text()).sections) == [p.key for p in report_parts()]
    res = CliRunner().invoke(app, ["report", "run-nope", "--data-root", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [f"error: no run 'run-nope' in {tmp_path / 'runs'} (runs there: r2)"]


def test_shard_table_holds_the_runs_check(page, loop_run):
    _, record = loop_run
    rows = page.sections["shards"]["tables"]["shards"]
    assert {r[0]: (int(r[1]), int(r[2])) for r in rows} == {ds: (n, 0) for ds, n in record["shards"]["datasets"].items()}
    assert sum(int(r[1]) for r in rows) == record["shards"]["checked"] > 0
