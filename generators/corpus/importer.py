"""Import outside multi-hop QA sets as `documents` and `triples`.

Accepted records:
  HotpotQA / 2WikiMultihopQA: `_id, question, answer, type, level, context [[title,
      [sentences]]], supporting_facts [[title, sent_idx]]` (2Wiki's `evidences` are kept in
      meta); the Hugging Face layout (context {"title": [...], "sentences": [[...]]},
      supporting_facts {"title": [...], "sent_id": [...]}) works too.
  plain: `question, answer, context` or `golden_context` (one passage string, or a list
      of passages: strings, {"title", "text"} objects or [title, text] pairs), optional
      `aliases`, `id`/`_id`, `type`/`qtype`, `hop_count`.
  documents: `title, text` without a question (optional `id`, `url`, `kind`/`category`,
      other fields kept), or a folder of `.txt`, `.md` and `.html` files
      (generators/corpus/folder.py): split into passages (generators/corpus/passages.py),
      written as documents only, no triples.

Every context paragraph becomes a document (doc_id = hash of title and text, so a
paragraph shared by many questions is stored once). golden_doc_ids are the documents of
the supporting titles (HotpotQA) or all given context (plain); hop_count is the number of
distinct supporting titles; qtype is the record's type or "unknown". A record that breaks
these rules is rejected with its place in the file and `_id`, never dropped silently.

    from generators.corpus.importer import import_file
    report = import_file(Path("hotpot_dev.json"), root="data", dataset="hotpot")
    # or: forgeplay corpus import hotpot_dev.json --dataset hotpot
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from generators.corpus.folder import folder_digest, iter_folder
from generators.corpus.ids import doc_id, triple_id
from generators.corpus.passages import DocumentError, Split, is_document, passages_of
from storage.files import write_text
from storage.manifest import file_sha256
from storage.runs import runs_dir, save_run
from storage.userfiles import detect_container, iter_records

STYLES = ("auto", "hotpot", "plain", "documents")
BATCH = 1000  # records per write call
ROWS_PER_SHARD = 50_000  # documents (and triples) a shard of an imported corpus holds


class RecordError(ValueError):
    """A record that cannot be imported; the message is the reason shown to the user."""


@dataclass
class ImportReport:
    run_id: str
    source: str
    container: str
    records: int = 0
    imported: int = 0
    documents: int = 0
    texts: int = 0  # records that were documents (no question), split into passages
    written: dict = field(default_factory=dict)
    rejects: list[dict] = field(default_factory=list)
    qtypes: dict = field(default_factory=dict)
    hops: dict = field(default_factory=dict)


def _text(value, what: str) -> str:
    if isinstance(value, bool) or value is None:
        raise RecordError(f"missing {what}" if value is None else f"{what} is not text")
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        raise RecordError(f"{what} is not text (got {type(value).__name__})")
    if not value.strip():
        raise RecordError(f"empty {what}")
    return value.strip()


def join_sentences(sentences: list[str]) -> str:
    """HotpotQA sentences carry their own leading spaces; 2Wiki's do not."""
    out = ""
    for s in sentences:
        if out and not (out[-1:].isspace() or s[:1].isspace()):
            out += " "
        out += s
    return out.strip()


def _pairs(value, keys: tuple[str, str], what: str) -> list[tuple]:
    """[[a, b], ...] or the Hugging Face {"a": [...], "b": [...]} layout, as a list of pairs."""
    if isinstance(value, dict) and all(k in value for k in keys):
        a, b = value[keys[0]], value[keys[1]]
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            return list(zip(a, b))
        raise RecordError(f"{what} columns {keys[0]!r} and {keys[1]!r} are not lists of equal length")
    if not isinstance(value, list):
        raise RecordError(f"{what} is not a list (got {type(value).__name__})")
    out = []
    for item in value:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise RecordError(f"{what} item is not a [{keys[0]}, {keys[1]}] pair: {json.dumps(item)[:80]}")
        out.append(tuple(item))
    return out


def _hotpot(rec: dict, source: str) -> tuple[list[dict], dict]:
    context = _pairs(rec.get("context"), ("title", "sentences"), "context") if "context" in rec else None
    if context is None:
        raise RecordError("missing context")
    paragraphs: dict[str, tuple[str, list[str]]] = {}
    docs = []
    for title, sents in context:
        if not isinstance(title, str) or not isinstance(sents, list) or not all(isinstance(s, str) for s in sents):
            raise RecordError(f"context entry for {str(title)[:60]!r} is not [title, [sentences]]")
        text = join_sentences(sents)
        if title in paragraphs or not text:
            continue
        paragraphs[title] = (doc_id(title, text), sents)
        docs.append({"doc_id": paragraphs[title][0], "title": title, "text": text, "source": source, "meta": None})
    if "supporting_facts" not in rec:
        raise RecordError("missing supporting_facts")
    facts = _pairs(rec["supporting_facts"], ("title", "sent_id"), "supporting_facts")
    if not facts:
        raise RecordError("no supporting facts")
    golden, support = [], []
    for title, idx in facts:
        if title not in paragraphs:
            raise RecordError(f"supporting fact title {str(title)[:60]!r} is not in the context")
        did, sents = paragraphs[title]
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(sents):
            raise RecordError(f"supporting fact index {idx!r} is out of range for {title!r} ({len(sents)} sentences)")
        if did not in golden:
            golden.append(did)
        fact = {"doc_id": did, "sentence": sents[idx].strip()}
        if fact not in support:
            support.append(fact)
    meta = {k: rec[k] for k in ("_id", "type", "level", "evidences") if rec.get(k) is not None}
    meta["format"] = "hotpot"
    return docs, _triple(rec, source, golden, support, len(golden), meta)


def _passage(p, i: int) -> tuple[str, str]:
    if isinstance(p, str):
        return "", p.strip()
    if isinstance(p, dict) and isinstance(p.get("text", p.get("passage")), str):
        return str(p.get("title") or ""), p.get("text", p.get("passage")).strip()
    if isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str):
        if isinstance(p[1], str):
            return p[0], p[1].strip()
        if isinstance(p[1], list) and all(isinstance(s, str) for s in p[1]):
            return p[0], join_sentences(p[1])
    raise RecordError(f"context passage {i} is not a string, {{title, text}} or [title, text]")


def _plain(rec: dict, source: str) -> tuple[list[dict], dict]:
    ctx = rec.get("golden_context", rec.get("context"))
    if ctx is None:
        raise RecordError("missing context (golden_context or context)")
    passages = [ctx] if isinstance(ctx, str) else ctx
    if not isinstance(passages, list) or not passages:
        raise RecordError("context is not a passage or a non-empty list of passages")
    docs, golden = [], []
    for i, p in enumerate(passages):
        title, text = _passage(p, i)
        if not text:
            continue
        did = doc_id(title, text)
        if did not in golden:
            golden.append(did)
            docs.append({"doc_id": did, "title": title, "text": text, "source": source, "meta": None})
    if not golden:
        raise RecordError("context passages are all empty")
    hops = rec.get("hop_count")
    if hops is not None and (isinstance(hops, bool) or not isinstance(hops, int) or hops < 1):
        raise RecordError(f"hop_count must be an integer >= 1, got {hops!r}")
    meta = {k: rec[k] for k in ("_id", "id", "type", "qtype", "level") if rec.get(k) is not None}
    meta["format"] = "plain"
    return docs, _triple(rec, source, golden, [], hops or len(golden), meta)


def _triple(rec: dict, source: str, golden: list[str], support: list[dict], hops: int, meta: dict) -> dict:
    question = _text(rec.get("question"), "question")
    answer = _text(rec.get("answer"), "answer")
    aliases = rec.get("aliases") or rec.get("answer_aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise RecordError("aliases is not a list of strings")
    aliases = [a for a in dict.fromkeys(a.strip() for a in aliases) if a and a != answer]
    rid = rec.get("_id", rec.get("id"))
    qtype = rec.get("type") or rec.get("qtype") or "unknown"
    if not isinstance(qtype, str):
        raise RecordError("type is not text")
    return {"triple_id": str(rid) if rid not in (None, "") else triple_id(source, question, answer, *golden),
            "question": question, "answer": answer, "aliases": aliases, "golden_doc_ids": golden,
            "supporting_facts": support, "hop_count": hops, "qtype": qtype, "source": source,
            "meta": json.dumps(meta, sort_keys=True, default=str)}


def normalise(rec: dict, style: str = "auto", source: str = "import",
              split: Split = Split()) -> tuple[list[dict], dict | None]:
    """(document rows, triple row or None for a document) of one record; raises RecordError
    with the reason."""
    if style == "documents" or (style == "auto" and is_document(rec)):
        try:
            return passages_of(rec, source, split), None
        except DocumentError as e:
            raise RecordError(str(e)) from None
    if style == "hotpot" or (style == "auto" and "supporting_facts" in rec):
        return _hotpot(rec, source)
    return _plain(rec, source)


def import_file(path: Path, root, dataset: str, *, style: str = "auto", container: str | None = None,
                source: str | None = None, run_id: str | None = None, split: Split = Split(),
                progress: Callable[[int], None] | None = None) -> ImportReport:
    """Read `path` (a file, or a folder of pages), write documents and triples to (root,
    dataset), report rejects."""
    from storage.shards import ShardWriter

    if style not in STYLES:
        raise ValueError(f"unknown record style {style!r}; use one of {', '.join(STYLES)}")
    split.check()
    folder = path.is_dir()
    container = "folder" if folder else container or detect_container(path)
    source = source or f"import:{path.name}"
    digest = folder_digest(path) if folder else file_sha256(path)
    keyed = f"{digest}|{style}|{container}|{source}"
    if split != Split():  # (the defaults keep the run ids imports had before documents were read)
        keyed += f"|{split.passage_words}|{split.passage_overlap}"
    config_hash = hashlib.sha256(keyed.encode()).hexdigest()[:16]
    run_id = run_id or f"import-{config_hash[:12]}"
    report = ImportReport(run_id, source, container)
    lineage = {"config_hash": config_hash, "parent_ids": []}
    seen_docs: set[str] = set()
    docs_buf, triples_buf = [], []
    with ShardWriter(root, dataset, "documents", run_id, lineage=lineage, rows_per_shard=ROWS_PER_SHARD) as dw, \
            ShardWriter(root, dataset, "triples", run_id, lineage=lineage, rows_per_shard=ROWS_PER_SHARD) as tw:
        def flush() -> None:
            report.written["documents"] = report.written.get("documents", 0) + dw.write(docs_buf)
            report.written["triples"] = report.written.get("triples", 0) + tw.write(triples_buf)
            docs_buf.clear()
            triples_buf.clear()

        for raw in (iter_folder(path) if folder else iter_records(path, container)):
            report.records += 1
            if progress:
                progress(1)
            try:
                if raw.error:
                    raise RecordError(raw.error)
                docs, triple = normalise(raw.record, "documents" if folder else style, source, split)
            except RecordError as e:
                report.rejects.append({"where": raw.where, "_id": raw.raw_id, "reason": str(e)})
                continue
            for d in docs:
                if d["doc_id"] not in seen_docs:
                    seen_docs.add(d["doc_id"])
                    docs_buf.append(d)
            report.imported += 1
            if triple is None:
                report.texts += 1
                if len(docs_buf) >= BATCH:
                    flush()
                continue
            triples_buf.append(triple)
            report.qtypes[triple["qtype"]] = report.qtypes.get(triple["qtype"], 0) + 1
            report.hops[triple["hop_count"]] = report.hops.get(triple["hop_count"], 0) + 1
            if len(triples_buf) >= BATCH:
                flush()
        flush()
    report.documents = len(seen_docs)
    write_text(runs_dir(root, dataset) / f"{run_id}.rejects.jsonl",
               "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in report.rejects))
    save_run(root, dataset, run_id, {
        "command": "corpus import", "run_id": run_id, "dataset": dataset, "file": str(path),
        "sha256": digest, "container": container, "style": style, "source": source, "config_hash": config_hash,
        "passage_words": split.passage_words, "passage_overlap": split.passage_overlap, "texts": report.texts,
        "records": report.records, "imported": report.imported, "rejected": len(report.rejects),
        "documents": report.documents, "written": report.written})
    return report
