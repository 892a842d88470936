"""`openai` backend: any OpenAI-compatible `/v1/chat/completions` server over async HTTP.

Works with `vllm serve`, SGLang, `python -m generators.llm.server` (this project's own
server over any backend) and hosted APIs. It keeps the engine busy:

- Requests stream: `submit(requests)` returns a future at once and the requests join one
  queue on a background event loop, so a caller prepares its next batch while the server
  works; `generate` is `submit(...).result()`.
- Concurrency adapts per endpoint (generators/llm/limiter.py): from 64 in flight it
  doubles while latency holds, then grows slowly, and backs off on rising latency or when
  many answers are 429/503/timeouts. Where the server states its load at `/metrics` (vLLM,
  SGLang: generators/llm/server_load.py), read every quarter second while requests are in
  flight, that decides instead of latency: it grows while the server queues nothing and
  stops at what the server runs. `max_concurrency=N` fixes it at N per endpoint.
- `base_url` may name several endpoints, comma-separated; each request goes to the one
  with the most room, a retry possibly to another.
- Transient failures (429, 5xx, timeouts, dropped connections, malformed answers:
  "bad_response") are retried with exponential backoff and jitter, honouring Retry-After,
  and counted (`usage.retries`). An endpoint that refuses or drops connections (a restart)
  is asked for its model list every `backoff` seconds by one request, the probe, until it
  answers (or until it has been down as long as a request's retries back off in all); the
  rest wait for it, and all go again the moment it answers. Any other 4xx stops every request in flight at once with
  one line naming the server and the request (`BackendError`).
- With a `journal` (storage/journal.py), every completed answer is journaled as it
  arrives, keyed by `request_key` (a hash of the request body, seed included), and a
  request already in the journal is answered from it, never sent again. A request asked
  again while it is in flight (the same key, in one batch or another) waits for that one's
  answer instead of being sent twice.

    from generators.llm.base import ChatRequest
    from generators.llm.openai_backend import OpenAIBackend
    b = OpenAIBackend("http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1", "smollm2")
    b.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], n=2)])
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Sequence

import aiohttp
from tqdm.auto import tqdm

from generators.llm.base import BackendError, ChatRequest, Completion, Declared, Usage
from generators.llm.limiter import START, AdaptiveLimit, Slots
from generators.llm.openai_http import (RETRY_STATUS, _Result, _Retryable, api_url, chat_url,  # noqa: F401
                                        error_message, parse_response, parse_retry_after, split_urls)
from generators.llm.server_load import metrics_url, parse_load

OVERLOAD_STATUS = {429, 503}


def request_key(body: dict) -> str:
    """The journal key of a request: a hash of its body (model, messages, sampling, seed)."""
    keep = {k: v for k, v in body.items() if k != "return_token_ids"}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


class OpenAIBackend(Declared):
    """Client for OpenAI-compatible chat completions servers (see the module docstring)."""

    name = "openai"
    concurrent = True  # (a server: each conversation's requests go as they come)

    def __init__(self, base_url: str, model: str, max_concurrency: int | None = None, max_retries: int = 8,
                 timeout: float = 60, api_key: str | None = None, backoff: float = 0.5,
                 max_backoff: float = 30.0, return_token_ids: bool = True,
                 extra_body: dict | None = None, journal=None):
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1 (or None: adapt to the server)")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = base_url
        self.urls = split_urls(base_url)
        self.chat_urls = [chat_url(u) for u in self.urls]
        self.url = self.chat_urls[0]
        self.model = model
        self.fixed = max_concurrency
        self.limits = [AdaptiveLimit(start=max_concurrency or START, fixed=max_concurrency is not None)
                       for _ in self.urls]
        self.max_retries = max_retries
        self.timeout = float(timeout)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.return_token_ids = return_token_ids  # switched off if the server rejects it
        self.extra_body = dict(extra_body or {})
        self.journal = journal
        self.usage = Usage()
        self._start()

    def _start(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None
        self._slots = Slots(self.limits)
        self._live: set[asyncio.Task] = set()  # requests in flight
        self._asked: dict[str, asyncio.Task] = {}  # the same, by request key: a request asked twice is sent once
        self._batches: set[asyncio.Task] = set()
        self._fatal: BackendError | None = None
        self._active, self._since = 0, 0.0
        self._watch: asyncio.Task | None = None  # reads the servers' load while requests are in flight
        self._unread: set[int] = set()  # endpoints whose server states no load

    @property
    def max_concurrency(self) -> int:
        """Requests in flight at most right now, over every endpoint."""
        return self._slots.limit

    # -- request building ------------------------------------------------------------------
    def body(self, req: ChatRequest) -> dict:
        """The JSON body sent for one request."""
        body: dict[str, Any] = {"model": self.model, "messages": req.messages, "n": req.n,
                                "temperature": req.temperature, "top_p": req.top_p,
                                "max_tokens": req.max_tokens}
        if req.stop:
            body["stop"] = list(req.stop)
        if req.seed is not None:
            body["seed"] = req.seed
        if req.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = 0
        if self.return_token_ids:
            body["return_token_ids"] = True
        body.update(self.extra_body)
        return body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, max(self.max_backoff, self.timeout)) + random.uniform(0, 0.1)
        return self._backoff(attempt) * random.uniform(0.5, 1.5)

    def _backoff(self, attempt: int) -> float:
        """The backoff before retry `attempt` + 1, without its jitter."""
        return min(self.max_backoff, self.backoff * (2 ** attempt))

    @property
    def max_down(self) -> float:
        """Seconds a down endpoint is waited for: as long as a request's retries back off in all."""
        return sum(self._backoff(a) for a in range(self.max_retries))

    # -- one request -------------------------------------------------------------------------
    async def _attempt(self, k: int, index: int, req: ChatRequest) -> _Result:
        asked_token_ids = self.return_token_ids
        url = self.chat_urls[k]
        try:
            async with self._session.post(url, json=self.body(req)) as resp:
                status, text = resp.status, (await resp.read()).decode("utf-8", errors="replace")
                retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        except asyncio.TimeoutError:
            raise _Retryable(f"timeout after {self.timeout:g} s", overload=True) from None
        except aiohttp.ClientError as e:
            raise _Retryable(f"connection: {type(e).__name__}: {e}", down=True) from None
        if status == 200:
            return parse_response(text, req.n, req.logprobs)
        msg = error_message(text)
        if status in RETRY_STATUS or status >= 500:
            raise _Retryable(f"HTTP {status}: {msg}", retry_after, overload=status in OVERLOAD_STATUS)
        if status == 400 and asked_token_ids and "return_token_ids" in msg:
            self.return_token_ids = False  # a server without vLLM's extension: resend, free
            return await self._attempt(k, index, req)
        raise BackendError(f"{self.urls[k]}: request {index}: HTTP {status} (not retried): {msg} "
                           f"[seed {req.seed}, {len(req.messages)} messages, last: "
                           f"{str(req.messages[-1].get('content'))[:60]!r}]")

    async def _request(self, index: int, req: ChatRequest, key: str) -> list[Completion]:
        attempt, k, probe = 0, None, False  # probe: this request holds a down endpoint's one slot
        while True:
            if k is None:
                k = await self._slots.acquire(first=attempt > 0)
            lim, t0, error, result = self.limits[k], time.monotonic(), None, None
            try:
                result = await self._attempt(k, index, req)
            except _Retryable as e:
                error = e
            except BaseException as e:  # not retried (BackendError), or the batch was cancelled
                self.usage.failures += isinstance(e, BackendError)
                self._give_back(k, probe)
                raise
            if result is not None:
                lim.observe((time.monotonic() - t0) / max(1, result.completion_tokens))
                lim.mark_up()  # back (or never gone): the queue gets its room again
                self._slots.release(k)
                break
            lim.observe(None, overload=error.overload)
            if error.down:  # one request keeps trying it; the others wait for it instead of retrying
                lim.mark_down()
                if not lim.probing:
                    lim.probing = probe = True
            if probe and error.down:  # (a probe answered otherwise, say 503, is retried as any request)
                try:
                    back = await self._back_up(k, lim)
                except BaseException:
                    self._give_back(k, probe)
                    raise
                if back:  # (marked up: the others get their room; this request goes again with them)
                    self.usage.retries += 1
                    probe = False
                    continue
                self.usage.failures += 1
                self._give_back(k, probe)
                raise BackendError(f"{self.urls[k]}: request {index}: gave up after the server was unreachable "
                                   f"for {time.monotonic() - lim.down_since:.0f} s; last error: {error.reason}")
            if attempt >= self.max_retries:
                self.usage.failures += 1
                self._give_back(k, probe)
                raise BackendError(f"{self.urls[k]}: request {index}: gave up after {attempt + 1} attempts; "
                                   f"last error: {error.reason}")
            self.usage.retries += 1
            attempt += 1
            if not probe:
                self._slots.release(k)
                k = None
                if lim.down:  # it waits in the queue for the probe (or another endpoint), no backoff of its own
                    continue
            try:
                await asyncio.sleep(self._delay(attempt - 1, error.retry_after))
            except BaseException:
                if probe:
                    self._give_back(k, probe)
                raise
        self.usage.requests += 1
        self.usage.prompt_tokens += result.prompt_tokens
        self.usage.completion_tokens += result.completion_tokens
        if self.journal is not None:
            self.journal.put(key, [c.to_dict() for c in result.completions])
        return result.completions

    async def _back_up(self, k: int, lim: AdaptiveLimit) -> bool:
        """Whether down endpoint k answers again, asked every `backoff` seconds with its model list
        (a request the server answers at once, where a completion would hold a slot) for as long
        as it may stay down (`max_down`); when it does, it is marked up."""
        url = api_url(self.urls[k]) + "/models"
        while time.monotonic() - lim.down_since <= self.max_down:
            await asyncio.sleep(self.backoff * random.uniform(0.5, 1.5))
            try:
                async with self._session.get(url) as resp:
                    await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError):
                continue
            lim.mark_up()
            self._slots.wake()
            return True
        return False

    def _give_back(self, k: int, probe: bool) -> None:
        """Release endpoint k's slot; a probe that ends without an answer lets another probe."""
        if probe:
            self.limits[k].probing = False
        self._slots.release(k)

    # -- a batch -------------------------------------------------------------------------------
    async def _batch(self, requests: Sequence[ChatRequest], progress: bool) -> list[list[Completion]]:
        for i, req in enumerate(requests):
            if req.n < 1:
                raise BackendError(f"request {i}: n must be >= 1, got {req.n}")
        if self._session is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._session = aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout),
                                                  connector=aiohttp.TCPConnector(limit=0))
        if self._active == 0:
            self._fatal, self._since = None, time.perf_counter()
        if self.fixed is None and (self._watch is None or self._watch.done()):
            self._watch = asyncio.ensure_future(self._read_loads())
        self._active += 1
        self._batches.add(asyncio.current_task())
        out: list[list[Completion] | None] = [None] * len(requests)
        tasks: dict[int, asyncio.Task] = {}
        bar = tqdm(total=len(requests), desc=f"openai {self.model}", unit="req", disable=not progress)
        try:
            for i, req in enumerate(requests):
                key = request_key(self.body(req))
                hit = self.journal.get(key) if self.journal is not None else None
                if hit is not None:
                    out[i] = [Completion(**c) for c in hit]
                    self.usage.journaled += 1
                    continue
                task = self._asked.get(key)
                if task is None:  # (a request asked again while it is in flight is not sent again)
                    task = self._asked[key] = asyncio.ensure_future(self._request(i, req, key))
                    self._live.add(task)
                    task.add_done_callback(self._live.discard)
                    task.add_done_callback(lambda t, k=key: self._asked.pop(k) if self._asked.get(k) is t else None)
                task.add_done_callback(lambda _t: bar.update(1))
                tasks[i] = task
            await self._gather(tasks, out)
            return out  # type: ignore[return-value]
        finally:
            self._batches.discard(asyncio.current_task())
            bar.close()
            self._active -= 1
            if self._active == 0:
                self.usage.seconds += time.perf_counter() - self._since

    async def _read_loads(self, every: float = 0.25) -> None:
        """While batches are in flight, the load each endpoint's server states goes to its
        limit (`AdaptiveLimit.report`); a server that states none is not asked again."""
        while self._active > 0:
            for k, url in enumerate(self.urls):
                if k in self._unread or self.limits[k].down:
                    continue
                try:
                    async with self._session.get(metrics_url(url)) as resp:
                        load = parse_load(await resp.text()) if resp.status == 200 else None
                except (aiohttp.ClientError, asyncio.TimeoutError, UnicodeDecodeError):
                    continue  # (a restart: asked again next time)
                if load is None:
                    self._unread.add(k)
                else:
                    self.limits[k].report(load.running, load.waiting)
                    self._slots.wake()  # (room that grew goes to the waiters at once)
            if len(self._unread) == len(self.urls):
                return
            await asyncio.sleep(every)

    async def _gather(self, tasks: dict[int, asyncio.Task], out: list) -> None:
        try:
            given: set[int] = set()
            for i, res in zip(tasks, await asyncio.gather(*tasks.values())):
                out[i] = [replace(c) for c in res] if id(res) in given else res  # (each caller its own copy)
                given.add(id(res))
        except BaseException as e:
            for t in tasks.values():
                t.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            if isinstance(e, BackendError):  # a request failed for good: stop every other one too
                self._fatal = self._fatal or e
                for t in list(self._live):
                    t.cancel()
            me = asyncio.current_task()
            if self._fatal is not None and not (me is not None and me.cancelling()):  # not cancelled by its caller
                raise self._fatal from None
            raise

    # -- public API --------------------------------------------------------------------------
    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="openai-backend", daemon=True)
                self._thread.start()
            return self._loop

    def submit(self, requests: Sequence[ChatRequest], progress: bool = False) -> Future:
        """A future of `generate(requests)`; the requests join the backend's stream at once."""
        return asyncio.run_coroutine_threadsafe(self._batch(list(requests), progress), self._running_loop())

    async def agenerate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        """Async `generate` (from any event loop): one list of `request.n` completions per request."""
        return await asyncio.wrap_future(self.submit(requests, progress))

    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        """One list of `request.n` completions per request, in request order (blocking)."""
        return self.submit(requests, progress).result()

    async def _shutdown(self) -> None:
        tasks = list(self._batches | self._live) + ([self._watch] if self._watch is not None else [])
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def close(self) -> None:
        """Close the HTTP session and stop the background loop (a later call starts them again)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._start()

    def __getstate__(self) -> dict:  # a worker process gets the settings, not the loop
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_lock", "_loop", "_thread", "_session", "_slots", "_live", "_asked", "_fatal", "_watch")}
        state["journal"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._start()
