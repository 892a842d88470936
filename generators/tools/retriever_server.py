"""A retriever served over Search-R1's retrieval API (`forgeplay serve-retriever`), so one index
feeds synthesis, self-play, evaluation and a verl run alike (each with `--retriever URL`).

    POST /retrieve  {"queries": [...], "topk": 3, "return_scores": false}
        -> {"result": [[{"id", "contents"}, ...], ...]}             (return_scores false)
        -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}
        -> {"result": [{"ids": [...], "scores_f32": "..."}, ...]}   ("columns": true)
    GET  /info      -> {"retriever", "fingerprint", "documents"}
    GET  /health    -> {"status": "ok"}

`"columns": true` is this server's own addition (other servers ignore it and answer as
above): each query's ids, best first, without contents, and their scores as one base64
string of little-endian float32 (the index's own scores, exact), which is what the
simulator's client (generators/tools/remote.py) asks for: a batch of 64 queries of 100
results each is then a list and a string per query to write and read, not 6,400 objects
and their decimal scores.

`contents` is "title\\ntext" (Search-R1's passages: the title on the first line). Queries are
answered in one worker thread, a request's queries as one batch (the retrievers are not
shared across threads), while the event loop keeps taking requests.

    with RetrieverServer(retriever, corpus) as server:   # 127.0.0.1, a free port
        server.url                                       # http://127.0.0.1:PORT/retrieve
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from generators.tools.retriever import Corpus, Retriever, best_scored, top_k

MAX_TOPK = 1000


def _dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))


class RetrieverServer:
    """An aiohttp server for one retriever, on its own event loop thread (module docstring)."""

    def __init__(self, retriever: Retriever, corpus: Corpus, host: str = "127.0.0.1", port: int = 0):
        self.retriever, self.corpus = retriever, corpus
        self.requests = self.queries = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="retrieve")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="retriever-server", daemon=True)
        self._thread.start()
        self.host = host
        self.port = self._call(self._listen(host, port))
        self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}/retrieve"

    def _call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _listen(self, host: str, port: int) -> int:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/retrieve", self._retrieve)
        app.router.add_get("/info", self._info)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True, backlog=1024)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    async def _info(self, request: web.Request) -> web.Response:
        return web.json_response({"retriever": self.retriever.name, "fingerprint": self.retriever.fingerprint,
                                  "documents": len(self.corpus.doc_ids)})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _retrieve(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            queries = body["queries"]
            topk = int(body.get("topk", 3))
            scores = bool(body.get("return_scores", False))
            contents = bool(body.get("return_contents", True))
            columns = bool(body.get("columns", False))
            if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
                raise ValueError("`queries` must be a list of strings")
            if not 1 <= topk <= MAX_TOPK:
                raise ValueError(f"`topk` must be from 1 to {MAX_TOPK}")
        except (ValueError, KeyError, TypeError) as e:
            return web.json_response({"error": f"bad request: {e}"}, status=400)
        if columns:
            result = await self._loop.run_in_executor(self._pool, self._columns, queries, topk)
        else:
            hits = await self._loop.run_in_executor(self._pool, top_k, self.retriever, queries, topk)
            result = [[self._doc(i, s, scores, contents) for i, s in row] for row in hits]
        self.requests += 1
        self.queries += len(queries)
        return web.json_response({"result": result}, dumps=_dumps)

    def _columns(self, queries: list[str], k: int) -> list[dict]:
        """Each query's best `k` as {"ids": [...], "scores_f32": base64}, best first (`top_k`'s order)."""
        ids, out = self.corpus.doc_ids, []
        for s in self.retriever.score_many(queries):
            docs, scores = best_scored(s, k)
            f32 = scores.astype("<f4").tobytes()
            out.append({"ids": [ids[i] for i in docs], "scores_f32": base64.b64encode(f32).decode("ascii")})
        return out

    def _doc(self, i: int, score: float, with_score: bool, contents: bool) -> dict:
        doc = {"id": self.corpus.doc_ids[i], "contents": self.corpus.passages[i]} if contents else {
            "id": self.corpus.doc_ids[i]}
        return {"document": doc, "score": score} if with_score else doc

    def stop(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._pool.shutdown(wait=False)

    def __enter__(self) -> "RetrieverServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
