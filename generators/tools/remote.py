"""The `http://host:port/retrieve` retriever: a server speaking Search-R1's retrieval API
(its `search_r1/search/retrieval_server.py`; `forgeplay serve-retriever` is one), so a user's own
E5 or FAISS server can answer the simulated searches.

    POST /retrieve  {"queries": [...], "topk": 100, "return_scores": true}
    ->  {"result": [[{"document": {"id": ..., "contents": "title\\ntext"}, "score": ...}, ...], ...]}

A batch of queries is one request (at most `batch` queries each), asking for ids without
contents (`"return_contents": false`) as ids and float32 scores per query (`"columns":
true`, generators/tools/retriever_server.py), which `serve-retriever` honours and other
servers ignore: the corpus is here already, and either answer is read. A returned document is
matched to the corpus by its id, else by its contents; documents of neither are left out, and
a server whose answers name no document of the corpus is an error. The fingerprint is the one
the server reports at GET /info (`serve-retriever` does), else "" (replay then compares each
call's recorded results). Transient failures (connection refused or reset, 5xx) are retried
a few times; a server still gone raises `RetrieverError` with one line.
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
from typing import Iterable
from urllib.parse import urlparse

import numpy as np

from generators.tools.retrieval import Scored
from generators.tools.passages import Corpus, RetrieverError

RETRIES = (0.2, 0.5, 1.0)  # seconds before each retry


class RemoteRetriever:
    """Search-R1's retrieval API over HTTP (module docstring)."""

    def __init__(self, url: str, corpus: Corpus, depth: int = 100, batch: int = 256, timeout: float = 120.0):
        u = urlparse(url)
        self.name, self.host, self.port = url, u.hostname, u.port
        self.path = u.path or "/retrieve"
        self.depth, self.batch, self.timeout = depth, batch, timeout
        self.index_of = {d: i for i, d in enumerate(corpus.doc_ids)}
        self._corpus = corpus
        self._by_contents: dict[str, int] | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()  # one connection, one request at a time (threads share a simulator)
        info = self._request("GET", self.path.rsplit("/", 1)[0] + "/info", None, missing_ok=True)
        self.fingerprint = str((info or {}).get("fingerprint") or "")

    def _request(self, method: str, path: str, body: dict | None, missing_ok: bool = False):
        with self._lock:
            return self._ask(method, path, body, missing_ok)

    def _ask(self, method: str, path: str, body: dict | None, missing_ok: bool):
        data = json.dumps(body).encode() if body is not None else None
        last = ""
        for wait in (*RETRIES, None):
            try:
                if self._conn is None:
                    self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self._conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
                resp = self._conn.getresponse()
                raw = resp.read()
                if resp.status in (404, 405) and missing_ok:
                    return None
                if resp.status >= 500:
                    last = f"HTTP {resp.status}"
                elif resp.status != 200:
                    raise RetrieverError(f"retriever {self.name}: HTTP {resp.status} for {method} {path}: "
                                         f"{raw[:200].decode(errors='replace')}")
                else:
                    return json.loads(raw)
            except (OSError, http.client.HTTPException, ValueError) as e:
                last = f"{type(e).__name__}: {e}"
                self.close()
            if wait is None:
                break
            time.sleep(wait)
        raise RetrieverError(f"retriever {self.name} did not answer ({last}); start it again and rerun")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict]]:
        """The server's answer (`result`) for `queries`, in requests of at most `batch`."""
        out: list[list[dict]] = []
        for s in range(0, len(queries), self.batch):
            part = queries[s:s + self.batch]
            got = self._request("POST", self.path, {"queries": part, "topk": topk, "return_scores": True,
                                                    "return_contents": False, "columns": True})
            result = got.get("result") if isinstance(got, dict) else None
            if not isinstance(result, list) or len(result) != len(part):
                raise RetrieverError(f"retriever {self.name}: the answer has no `result` list of one entry per query")
            out += result
        return out

    def _index(self, item) -> int | None:
        doc = item.get("document", item) if isinstance(item, dict) else None
        if not isinstance(doc, dict):
            return None
        i = self.index_of.get(str(doc.get("id", doc.get("doc_id", ""))))
        if i is None and isinstance(doc.get("contents"), str):
            if self._by_contents is None:
                self._by_contents = {p: j for j, p in enumerate(self._corpus.passages)}
            i = self._by_contents.get(doc["contents"])
        return i

    def _documents(self, items: list) -> tuple[np.ndarray, np.ndarray]:
        """Corpus indices and scores of a query's results in Search-R1's shape, first of each."""
        docs, scores, seen = [], [], set()
        for rank, item in enumerate(items):
            i = self._index(item)
            if i is not None and i not in seen:
                seen.add(i)
                docs.append(i)
                s = item.get("score") if isinstance(item, dict) else None
                scores.append(float(s) if isinstance(s, (int, float)) else -float(rank))
        return np.array(docs, dtype=np.int64), np.array(scores, dtype=np.float32)

    def _columns(self, row: dict) -> tuple[np.ndarray, np.ndarray]:
        """Corpus indices and scores of a query's results as `"columns": true` gives them (ids,
        and their float32 scores in base64), first of each."""
        ids = row.get("ids")
        try:
            scores = np.frombuffer(base64.b64decode(row.get("scores_f32", ""), validate=True), dtype="<f4")
        except (TypeError, ValueError) as e:
            raise RetrieverError(f"retriever {self.name}: an answer's `scores_f32` is not base64 float32 ({e})") from None
        if not isinstance(ids, list) or len(scores) != len(ids):
            raise RetrieverError(f"retriever {self.name}: an answer's `ids` and `scores_f32` differ in length")
        docs = list(map(self.index_of.get, map(str, ids)))
        if None in docs or len(set(docs)) < len(docs):  # unknown ids, or one twice: the first of each known
            seen: set[int] = set()
            keep = [r for r, i in enumerate(docs) if i is not None and not (i in seen or seen.add(i))]
            docs, scores = [docs[r] for r in keep], scores[keep]
        return np.array(docs, dtype=np.int64), scores.astype(np.float32)

    def score_many(self, queries: Iterable[str]) -> list[Scored]:
        queries = list(queries)
        uniq = list(dict.fromkeys(queries))
        got: dict[str, Scored] = {}
        for q, items in zip(uniq, self.retrieve(uniq, self.depth)):
            if isinstance(items, dict) and "ids" in items:  # `"columns": true` answered (module docstring)
                docs, scores = self._columns(items)
                items = items["ids"]
            else:
                docs, scores = self._documents(items or [])
            if len(items) and not len(docs):
                raise RetrieverError(f"retriever {self.name} answers with documents that are not in this corpus "
                                     f"(first: {json.dumps(items[0])[:120]}); serve the dataset's documents")
            order = np.argsort(docs, kind="stable")
            got[q] = Scored(docs[order], scores[order])
        return [got[q] for q in queries]


def ping(url: str) -> None:
    """One query of one result, answered, or RetrieverError."""
    r = RemoteRetriever.__new__(RemoteRetriever)
    u = urlparse(url)
    r.name, r.host, r.port, r.path, r.timeout, r.batch, r._conn = url, u.hostname, u.port, u.path or "/retrieve", 10.0, 1, None
    r._lock = threading.Lock()
    try:
        r.retrieve(["ping"], 1)
    finally:
        r.close()
