"""`forgeplay corpus` commands: help texts, `world` end to end into a data root (read back
with storage.reader and the DuckDB catalog), `import`, and readable errors."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from flows import cli_corpus
from storage.catalog import Catalog
from storage.reader import load_table

runner = CliRunner()


@pytest.fixture(scope="module")
def app():
    """The main app as flows/cli.py builds it (with the corpus group registered)."""
    from flows import cli

    if any(g.name == "corpus" for g in cli.app.registered_groups):
        return cli.app
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """forgeplay (test app)"""

    cli_corpus.register(app)
    return app


@pytest.mark.parametrize("args,expect", [
    (["corpus", "--help"], ["world", "import"]),
    (["corpus", "world", "--help"], ["--seed", "--entities", "--triples", "--qtypes", "--dataset", "--run-id"]),
    (["corpus", "import", "--help"], ["--format", "--dataset", "hotpot", "parquet", "rejects"]),
])
def test_help(app, args, expect):
    res = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for word in expect:
        assert word in res.output


def test_world_end_to_end(app, tmp_path):
    root = tmp_path / "data"
    res = runner.invoke(app, ["corpus", "world", "--seed", "3", "--entities", "200", "--triples", "60",
                              "--qtypes", "bridge=2,comparison=1,inference=1", "--dataset", "w3",
                              "--run-id", "r1", "--data-root", str(root)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "200 documents, 60 triples" in res.output and "bridge" in res.output
    docs = load_table("w3", "documents", root)
    triples = load_table("w3", "triples", root)
    assert docs.num_rows == 200 and triples.num_rows == 60
    assert set(triples.column("qtype").to_pylist()) == {"bridge", "comparison", "inference"}
    assert triples.column("qtype").to_pylist().count("bridge") == 30
    with Catalog(root) as cat:
        assert cat.sql("SELECT count(*) FROM w3_documents").fetchall()[0][0] == 200
        n, golden_ok = cat.sql("SELECT count(*), bool_and(len(golden_doc_ids) = hop_count) FROM w3_triples "
                               "WHERE run_id = 'r1'").fetchall()[0]
        assert n == 60 and golden_ok
        joined = cat.sql("SELECT count(DISTINCT d.doc_id) FROM (SELECT unnest(golden_doc_ids) AS g FROM w3_triples) t "
                         "JOIN w3_documents d ON d.doc_id = t.g").fetchall()[0][0]
        assert joined > 60
    saved = json.loads((root / "w3" / "_runs" / "r1.json").read_text())
    assert saved["config"]["qtypes"] == {"bridge": 0.5, "comparison": 0.25, "inference": 0.25}
    # same command again: nothing new is written
    res = runner.invoke(app, ["corpus", "world", "--seed", "3", "--entities", "200", "--triples", "60",
                              "--qtypes", "bridge=2,comparison=1,inference=1", "--dataset", "w3",
                              "--run-id", "r1", "--data-root", str(root)], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "wrote 0 documents and 0 triples" in " ".join(res.output.split())
    assert load_table("w3", "triples", root).num_rows == 60


@pytest.mark.parametrize("args,message", [
    (["--qtypes", "bridge=1,riddle=1"], "unknown question type"),
    (["--qtypes", "bridge"], "expected NAME=SHARE"),
    (["--entities", "10"], "at least 50"),
    (["--triples", "-1"], ">= 0"),
    (["--run-id", "bad id!"], "invalid run id"),
])
def test_world_bad_input(app, tmp_path, args, message):
    res = runner.invoke(app, ["corpus", "world", "--dataset", "w", "--data-root", str(tmp_path), *args],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())


def test_import_cli(app, tmp_path):
    good = {"_id": "a1", "question": "Where was Edith Carrow born?", "answer": "Plymouth", "type": "bridge",
            "supporting_facts": [["Edith Carrow", 0]],
            "context": [["Edith Carrow", ["Edith Carrow was born in Plymouth."]]]}
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "_id": "a2", "answer": ""}) + "\n{oops\n")
    root = tmp_path / "data"
    res = runner.invoke(app, ["corpus", "import", str(path), "--dataset", "imp", "--data-root", str(root)],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "2 skipped records" in out and "line 2" in out and "a2" in out and "empty answer" in out
    assert "line 3" in out and "invalid JSON" in out
    assert load_table("imp", "triples", root).num_rows == 1

    res = runner.invoke(app, ["corpus", "import", str(path), "--dataset", "imp", "--format", "parquet",
                              "--data-root", str(root)], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "parquet" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n[1]\n")
    res = runner.invoke(app, ["corpus", "import", str(bad), "--dataset", "imp", "--data-root", str(root)],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "no record could be imported" in " ".join(res.output.split())
    res = runner.invoke(app, ["corpus", "import", str(tmp_path / "missing.json"), "--dataset", "imp",
                              "--data-root", str(root)])
    assert res.exit_code == 2 and "no such file" in res.output
