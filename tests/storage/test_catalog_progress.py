"""DuckDB's progress bar is drawn on standard output; a catalog's connection (storage/catalog.py
`connect`) draws it only when standard output is a terminal, so results redirected to a file
(`forgeplay sql ... --format csv > f.csv`) hold the results alone. The dedup check's own
connection never draws it (a flow's bars are tqdm's, on stderr)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from storage import catalog

REPO = Path(__file__).resolve().parents[2]
LONG = "SELECT count(*) FROM range(100000000) t(x) WHERE x % 7 = 3"  # ~0.3 s: past a bar shown at once


def test_no_bar_in_redirected_output():
    """A process whose stdout is a pipe: the query's output is its result and nothing else
    (DuckDB's bar shows from the first moment here, `progress_bar_time = 0`)."""
    code = ("from storage.catalog import connect\n"
            "con = connect()\n"
            "con.execute('SET progress_bar_time = 0')\n"
            f"print(con.sql({LONG!r}).fetchall()[0][0])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out == "14285714\n"


def test_the_bar_follows_the_terminal(monkeypatch):
    def bar() -> bool:
        with catalog.connect() as con:
            return con.sql("SELECT current_setting('enable_progress_bar_print')").fetchall()[0][0]

    monkeypatch.setattr(catalog, "_terminal", lambda: True)
    assert bar() is True
    monkeypatch.setattr(catalog, "_terminal", lambda: False)
    assert bar() is False


def test_a_plain_duckdb_connection_would_write_its_bar_into_the_output():
    """The failure this guards against, shown on DuckDB's defaults (if DuckDB stops drawing on
    a pipe, this test says so and the setting can go)."""
    code = ("import duckdb\n"
            "con = duckdb.connect()\n"
            "con.execute('SET progress_bar_time = 0')\n"
            f"print(con.sql({LONG!r}).fetchall()[0][0])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.endswith("14285714\n") and "%" in out


def test_the_dedup_check_never_draws_the_bar():
    from validators.check import CheckContext
    from validators.dedup import DedupCheck
    from validators.validator import ValidateConfig

    ctx = CheckContext("trajectories", ValidateConfig(kind="trajectories"))
    DedupCheck().start(ctx)
    con = ctx.state["dedup:con"]
    assert con.sql("SELECT current_setting('enable_progress_bar_print')").fetchall()[0][0] is False
