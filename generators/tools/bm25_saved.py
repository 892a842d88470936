"""BM25 indexes kept on disk: a command that searches a corpus an earlier command indexed
reads bm25s's arrays back (tens of milliseconds for 50,000 documents) instead of tokenizing
and indexing every document again (about 1.5 s on one core).

An index is kept in the data root's index folder (generators/tools/retriever.py `index_dir`)
as `bm25-<key>`, bm25s's own files (`BM25.save`); the key hashes the index's fingerprint (its
texts in order, the stopwords, bm25s's version) with `FORMAT`. It is written to a temporary
folder and renamed into place, so a reader finds a whole index or none. A folder that does not
load, or holds another number of documents, is built again. The `KEEP` indexes used last are
kept; older ones, and temporary folders a killed command left, are removed.

    index = load_or_build(texts, "en", index_dir(root))   # a BM25Index
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

import bm25s

from generators.tools.passages import text_hash
from generators.tools.retrieval import BM25Index, fingerprint_of

FORMAT = 1  # raised when BM25Index tokenizes or indexes differently: older indexes are not read
KEEP = 8
STALE_S = 3600  # a temporary folder this old was left by a command that died while writing


def path_of(texts: Sequence[str], stopwords: str, folder: Path) -> Path:
    """Where the index of `texts` is kept in `folder`."""
    return folder / f"bm25-{text_hash([fingerprint_of(texts, stopwords), FORMAT])}"


def load_or_build(texts: Sequence[str], stopwords: str = "en", folder: str | Path | None = None) -> BM25Index:
    """The BM25 index of `texts`: read from `folder` when kept there, else built (and kept
    there when `folder` is given and the texts have a token to index)."""
    if folder is None:
        return BM25Index(texts, stopwords)
    path = path_of(texts, stopwords, Path(folder))
    got = _read(path, len(texts))
    if got is not None:
        try:
            os.utime(path)  # (used last: kept longest)
        except OSError:  # (a data root this user may only read)
            pass
        return BM25Index(texts, stopwords, retriever=got)
    if path.exists():  # (unreadable: replaced by the one built now)
        shutil.rmtree(path, ignore_errors=True)
    index = BM25Index(texts, stopwords)
    if index.indexed:
        _write(index, path)
    return index


def _read(path: Path, size: int) -> bm25s.BM25 | None:
    if not path.is_dir():
        return None
    try:
        got = bm25s.BM25.load(str(path), show_progress=False)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return got if got.scores.get("num_docs") == size else None


def _write(index: BM25Index, path: Path) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".bm25-", dir=path.parent))
        index.retriever.save(str(tmp), show_progress=False)
        os.rename(tmp, path)  # (fails when another command kept the same index first: theirs stays)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    _prune(path.parent)


def _prune(folder: Path) -> None:
    """Keep the `KEEP` indexes used last; remove temporary folders older than `STALE_S`."""
    now, kept = time.time(), []
    for p in folder.iterdir():
        try:
            if p.name.startswith(".bm25-") and now - p.stat().st_mtime > STALE_S:
                shutil.rmtree(p, ignore_errors=True)
            elif p.name.startswith("bm25-"):
                kept.append((p.stat().st_mtime, p))
        except OSError:
            continue
    for _, p in sorted(kept, reverse=True)[KEEP:]:
        shutil.rmtree(p, ignore_errors=True)
