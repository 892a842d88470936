"""Documents without questions: `{title, text}` rows as JSON Lines, a JSON array or Parquet,
and a folder of .txt/.md/.html pages, split into passages stored as `documents` (no triples);
bad rows reported by line, a broken file by its path; the same passages and ids on a rerun."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from generators.corpus.importer import import_file
from generators.corpus.passages import Split, split_text
from storage.reader import load_table

LONG = " ".join(f"Sentence {i} of the Vell chronicle names the harbour of Osk{i}." for i in range(60))
DOCS = [
    {"id": "vell", "title": "River Vell", "text": LONG, "url": "https://example.org/vell", "kind": "river",
     "era": "medieval"},
    {"title": "Velmora", "text": "Velmora is a city on the river Vell. It was founded in 1102.", "category": "city"},
    {"title": "Ada Quell", "body": "Ada Quell was born in Velmora and built its first bridge."},
]
BAD = [{"id": "x1", "text": "A page without a title."}, {"id": "x2", "title": "Empty", "text": "   "}]


def _rows(root, dataset):
    return sorted(load_table(dataset, "documents", root).to_pylist(), key=lambda r: r["doc_id"])


def _check_docs(root, dataset, report):
    rows = _rows(root, dataset)
    metas = [json.loads(r["meta"]) for r in rows]
    assert report.texts == 3 and report.imported == 3
    assert load_table(dataset, "triples", root).num_rows == 0
    vell = [(m, r) for m, r in zip(metas, rows) if m["doc"] == "vell"]
    assert len(vell) > 1 and all(m["passages"] == len(vell) for m, _ in vell)
    assert sorted(m["passage"] for m, _ in vell) == list(range(len(vell)))
    assert all(m["url"] == "https://example.org/vell" and m["kind"] == "river" and m["fields"] == {"era": "medieval"}
               for m, _ in vell)
    assert all(len(r["text"].split()) <= 60 for _, r in vell)
    assert {m.get("kind") for m in metas} == {"river", "city", None}
    assert any(r["title"] == "Ada Quell" and "first bridge" in r["text"] for r in rows)
    return rows


def test_split_text_passages_overlap_and_cover_the_text():
    parts = split_text(LONG, Split(60, 12))
    assert len(parts) > 3 and all(len(p.split()) <= 60 for p in parts)
    for a, b in zip(parts, parts[1:]):  # the next passage starts with the last sentence of the one before
        last = a.rsplit("Sentence ", 1)[1]
        assert b.startswith("Sentence " + last)
    covered = " ".join(parts)
    assert all(f"Osk{i}." in covered for i in range(60))
    words = " ".join(["word"] * 130)  # one sentence longer than a passage is cut by words
    assert [len(p.split()) for p in split_text(words, Split(60, 0))] == [60, 60, 10]


@pytest.mark.parametrize("shape", ["jsonl", "json", "parquet"])
def test_every_file_shape_imports_documents_and_reports_bad_rows(tmp_path, shape):
    split = Split(60, 12)
    records = DOCS + BAD
    if shape == "jsonl":
        path = tmp_path / "pages.jsonl"
        path.write_text("\n".join([json.dumps(r) for r in records] + ['{"title": "Broken", "text": ']) + "\n")
    elif shape == "json":
        path = tmp_path / "pages.json"
        path.write_text(json.dumps(records))
    else:
        path = tmp_path / "pages.parquet"
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in ("id", "title", "text", "body", "kind")} for r in records]),
                       path)
    report = import_file(path, tmp_path / "data", "pages", split=split)
    where = {r["where"]: r["reason"] for r in report.rejects}
    first = {"jsonl": "line", "json": "index", "parquet": "row"}[shape]
    base = 1 if shape == "jsonl" else 0
    assert where[f"{first} {base + 3}"] == "missing title"
    assert where[f"{first} {base + 4}"] == "empty text"
    if shape == "jsonl":
        assert where["line 6"].startswith("invalid JSON")
    if shape == "parquet":  # the Parquet rows carry only id, title, text, body and kind
        rows = _rows(tmp_path / "data", "pages")
        assert len({json.loads(r["meta"])["doc"] for r in rows}) == 3 and report.texts == 3
    else:
        _check_docs(tmp_path / "data", "pages", report)


def _folder(tmp_path):
    pages = tmp_path / "pages"
    (pages / "people").mkdir(parents=True)
    (pages / "places").mkdir()
    (pages / "people" / "ada_quell.md").write_text("# Ada Quell\n\nAda Quell was born in Velmora.\n\n" + LONG)
    (pages / "places" / "velmora.html").write_text(
        "<html><head><title>Velmora</title><style>p {color: red}</style></head><body><h1>Velmora</h1>"
        "<p>Velmora is a city on the river Vell.</p><script>var x = 1;</script><p>It has a bridge &amp; a port.</p>"
        "</body></html>")
    (pages / "vell_river.txt").write_text("The Vell is a river that flows past Velmora.\n")
    (pages / "places" / "broken.txt").write_bytes(b"\xff\xfe\x00broken")
    (pages / "notes.pdf").write_bytes(b"%PDF")  # not a page: left alone
    return pages


def test_a_folder_imports_its_pages_and_reports_a_broken_file_by_path(tmp_path):
    report = import_file(_folder(tmp_path), tmp_path / "data", "pages", split=Split(60, 12))
    assert report.container == "folder" and report.records == 4 and report.texts == 3
    assert report.rejects == [{"where": "places/broken.txt", "_id": None, "reason": "not UTF-8 text (byte 0)"}]
    rows = _rows(tmp_path / "data", "pages")
    by_doc = {}
    for r in rows:
        by_doc.setdefault(json.loads(r["meta"])["doc"], []).append(r)
    assert set(by_doc) == {"people/ada_quell.md", "places/velmora.html", "vell_river.txt"}
    (html,) = by_doc["places/velmora.html"]
    assert html["title"] == "Velmora" and "It has a bridge & a port." in html["text"]
    assert "color" not in html["text"] and "var x" not in html["text"]
    assert json.loads(html["meta"])["kind"] == "places"
    assert {r["title"] for r in by_doc["people/ada_quell.md"]} == {"Ada Quell"}
    assert len(by_doc["people/ada_quell.md"]) > 1 and "# Ada" not in by_doc["people/ada_quell.md"][0]["text"]
    (txt,) = by_doc["vell_river.txt"]
    assert txt["title"] == "vell river" and "kind" not in json.loads(txt["meta"])


def test_a_rerun_makes_the_same_passages_and_ids_and_writes_nothing_twice(tmp_path):
    pages = _folder(tmp_path)
    first = import_file(pages, tmp_path / "a", "pages")
    again = import_file(pages, tmp_path / "a", "pages")
    elsewhere = import_file(pages, tmp_path / "b", "other")
    assert first.written["documents"] > 0 and again.written["documents"] == 0
    assert first.run_id == again.run_id
    strip = lambda rows: [(r["doc_id"], r["title"], r["text"], r["meta"]) for r in rows]  # noqa: E731
    assert strip(_rows(tmp_path / "a", "pages")) == strip(_rows(tmp_path / "b", "other"))
    assert elsewhere.documents == first.documents
    # other passage sizes are another run with other passages
    other = import_file(pages, tmp_path / "a", "pages", split=Split(30, 5))
    assert other.run_id != first.run_id and other.documents > first.documents


def test_cli_imports_a_folder_and_rejects_bad_split_options_early(tmp_path):
    from flows.cli import app

    pages = _folder(tmp_path)
    root = str(tmp_path / "data")
    res = CliRunner().invoke(app, ["--data-root", root, "corpus", "import", str(pages), "--dataset", "pages",
                                   "--passage-words", "60", "--passage-overlap", "12"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "places/broken.txt" in res.output and "not UTF-8 text" in res.output
    res = CliRunner().invoke(app, ["--data-root", root, "corpus", "import", str(pages), "--dataset", "pages",
                                   "--passage-words", "60", "--passage-overlap", "40"], env={"COLUMNS": "200"})
    assert res.exit_code != 0 and "--passage-overlap" in res.output
    res = CliRunner().invoke(app, ["--data-root", root, "corpus", "import", str(pages), "--dataset", "pages",
                                   "--format", "hotpot"], env={"COLUMNS": "200"})
    assert res.exit_code != 0 and "folder" in res.output


def test_readme_documents_commands_run(tmp_path, monkeypatch):
    """README's "Your own documents" block runs as written on a folder and a JSON Lines file."""
    import re
    import shlex
    from pathlib import Path

    from flows.cli import app

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    text = readme[readme.index("### Your own documents\n"):]
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    _folder(tmp_path)
    (tmp_path / "pages.jsonl").write_text("\n".join(json.dumps(r) for r in DOCS) + "\n")
    ran = 0
    for line in block.splitlines():
        args = shlex.split(line, comments=True)
        if not args:
            continue
        assert args[0] == "forgeplay"
        res = CliRunner().invoke(app, ["--data-root", str(tmp_path / "data"), *args[1:]], env={"COLUMNS": "200"})
        assert res.exit_code == 0, f"{line}\n{res.output}"
        ran += 1
    assert ran == 2
    metas = [json.loads(m) for m in load_table("pages", "documents", tmp_path / "data").column("meta").to_pylist()]
    assert {"vell", "places/velmora.html"} <= {m["doc"] for m in metas}
