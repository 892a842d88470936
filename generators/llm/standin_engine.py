"""A stand-in for a served inference engine (vLLM, SGLang, a hosted API): an OpenAI-
compatible HTTP server on 127.0.0.1 that behaves like a GPU server from the outside, so tests
and benchmarks can load any model-bound stage the way a real one would, in a second.

- `slots` sequences run at once; a request waits for a slot, then holds it for `latency`
  seconds plus `per_token` per completion token (a reply's words).
- Faults: `fail_503` (share of requests answered 503), `timeouts` (share never answered:
  the client's timeout fires), `unauthorized` (every request answered 401), `restart(down)`
  (drops every connection, refuses new ones for `down` seconds, comes back on the same
  port; `restart_at=K`: as the K-th request arrives), `pause()` / `resume()` (requests are taken and held unanswered).
- Replies are deterministic: choice c of a request is `scripted_reply(messages, seed + c)`
  (generators/llm/scripted.py: `scripted_text` of the last message, the examiner's next
  turn for self-play's examiner, or the corpus question builder's replies), so a rerun gets the same rows, and a request whose seed
  is its index in a batch gets what `ScriptedBackend` gives it.
- Its load at `GET /metrics`, as vLLM states it (generators/llm/server_load.py): the
  requests holding a slot and those waiting for one (`metrics=False`: no such page, as a
  hosted API).
- A policy server's development endpoints, as a trainer uses vLLM's (`--rollout-backend
  vllm-server --base-url`, generators/llm/vllm_server.py): `GET /health`, `POST
  /collective_rpc` (a weight load: counted in `loads`, the weights themselves not read) and
  `POST /reset_prefix_cache`. A load ends a phase: `phases` holds, per phase, its first
  request's arrival and last answer's completion with the busy slot-seconds at each, so
  `phase_share()` measures a trainer's rollouts without its updates between them.
- Counters: `received`, `completed`, `answered_503`, `timed_out`, `dropped`; per request
  key (`request_key`, the client's journal key), how many times it was received and
  completed, and `repaid`: receptions of a request already completed (work paid twice);
  `busy_seconds()`, the integral of busy slots over time, so `busy_share(a, b)` over a
  window is (busy_seconds at b - at a) / (slots x (b - a)).

    with StandinEngine(slots=256, latency=1.0, fail_503=0.05) as engine:
        ... OpenAIBackend(engine.url, "standin") ...
        print(engine.completed, engine.repaid, engine.busy_share(t0, t1))
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter

from aiohttp import web

from generators.llm.openai_backend import request_key
from generators.llm.scripted import scripted_reply


class StandinEngine:
    """See the module docstring."""

    def __init__(self, slots: int = 256, latency: float = 1.0, per_token: float = 0.0, fail_503: float = 0.0,
                 timeouts: float = 0.0, unauthorized: bool = False, model: str = "standin", seed: int = 0,
                 hang: float = 120.0, restart_at: int = 0, down: float = 0.5, keep_bodies: bool = False,
                 metrics: bool = True):
        self.slots, self.latency, self.per_token = slots, latency, per_token
        self.fail_503, self.timeouts, self.unauthorized, self.hang = fail_503, timeouts, unauthorized, hang
        self.model = model
        self.restart_at, self.down = restart_at, down  # restart once, as the restart_at-th request arrives
        self.keep_bodies = keep_bodies  # keep each completed request's body (`bodies`), to send them again
        self.metrics = metrics
        self.waiting = 0  # requests waiting for a slot
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.reset_counts()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="standin-engine", daemon=True)
        self._thread.start()
        self._call(self._setup())
        self.port = self._call(self._listen(0))
        self.url = f"http://127.0.0.1:{self.port}/v1"

    # -- counters ------------------------------------------------------------------------------
    def reset_counts(self) -> None:
        with self._lock:
            self.received = self.completed = self.answered_503 = self.timed_out = self.dropped = 0
            self.repaid = 0
            self.received_by_key: Counter[str] = Counter()
            self.completed_by_key: Counter[str] = Counter()
            self.busy, self.max_busy, self._integral, self._t = 0, 0, 0.0, time.monotonic()
            self.first_at = self.last_at = None  # first request received, last answer completed
            self.bodies: list[dict] = []
            self.body_phases: list[int] = []  # the phase each kept body was completed in
            self.loads = 0
            self.phases: list[tuple[float, float, float, float]] = []  # (first at, busy then, last at, busy then)
            self._phase: list[float] | None = None

    def _busy_change(self, delta: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._integral += self.busy * (now - self._t)
            self._t, self.busy = now, self.busy + delta
            self.max_busy = max(self.max_busy, self.busy)

    def busy_seconds(self) -> float:
        """Slot-seconds spent busy since the counters were reset (the busy-slot integral)."""
        with self._lock:
            return self._integral + self.busy * (time.monotonic() - self._t)

    def mark(self) -> tuple[float, float]:
        """(now, busy_seconds) to measure a window's busy share against (`busy_share`)."""
        return time.monotonic(), self.busy_seconds()

    def busy_share(self, start: tuple[float, float], end: tuple[float, float] | None = None) -> float:
        """The share of slot time busy between two `mark()`s (end: now)."""
        end = end or self.mark()
        return (end[1] - start[1]) / (self.slots * (end[0] - start[0])) if end[0] > start[0] else 0.0

    def stage_share(self) -> float:
        """Busy share from the first request received to the last answer completed."""
        if self.first_at is None or self.last_at is None or self.last_at <= self.first_at:
            return 0.0
        return self.busy_seconds() / (self.slots * (self.last_at - self.first_at))

    def _busy_now(self, now: float) -> float:  # (under the lock)
        return self._integral + self.busy * (now - self._t)

    def phase_share(self) -> tuple[float, float]:
        """(seconds, busy share) over the phases between weight loads, each from its first
        request's arrival to its last answer's completion."""
        with self._lock:
            phases = self.phases + ([tuple(self._phase)] if self._phase and self._phase[3] >= 0 else [])
        seconds = sum(p[2] - p[0] for p in phases)
        busy = sum(p[3] - p[1] for p in phases)
        return seconds, (busy / (self.slots * seconds) if seconds > 0 else 0.0)

    def twice_completed(self) -> int:
        """Requests completed more than once."""
        return sum(1 for v in self.completed_by_key.values() if v > 1)

    # -- the server -------------------------------------------------------------------------------
    def _call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _setup(self) -> None:
        self._sem = asyncio.Semaphore(self.slots)
        self._open = asyncio.Event()
        self._open.set()
        self._handlers: set[asyncio.Task] = set()
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        if self.metrics:
            app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        app.router.add_post("/collective_rpc", self._load)
        app.router.add_post("/reset_prefix_cache", self._health)
        self._app, self._runner = app, None

    async def _listen(self, port: int) -> int:
        self._runner = web.AppRunner(self._app, handle_signals=False, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True, backlog=4096)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        lines = []
        for name, value in (("vllm:num_requests_running", self.busy), ("vllm:num_requests_waiting", self.waiting)):
            lines += [f"# TYPE {name} gauge", f'{name}{{model_name="{self.model}"}} {float(value)}']
        return web.Response(text="\n".join(lines) + "\n")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _load(self, request: web.Request) -> web.Response:
        await request.read()
        with self._lock:
            self.loads += 1
            if self._phase is not None and self._phase[3] >= 0:
                self.phases.append(tuple(self._phase))
            self._phase = None
        return web.json_response({"results": [None]})

    async def _chat(self, request: web.Request) -> web.Response:
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            return await self._answer(request)
        finally:
            self._handlers.discard(task)

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = request_key(body)
        with self._lock:
            self.received += 1
            self.first_at = self.first_at or time.monotonic()
            if self._phase is None:
                now = time.monotonic()
                self._phase = [now, self._busy_now(now), now, -1.0]
            self.received_by_key[key] += 1
            self.repaid += self.completed_by_key[key] > 0
            draw = self._rng.random()
            if self.restart_at and self.received == self.restart_at:
                threading.Thread(target=self.restart, args=(self.down,), daemon=True).start()
        if self.unauthorized:
            return web.json_response({"error": {"message": "invalid API key"}}, status=401)
        if draw < self.fail_503:
            with self._lock:
                self.answered_503 += 1
            return web.json_response({"error": {"message": "engine overloaded"}}, status=503)
        if draw < self.fail_503 + self.timeouts:
            with self._lock:
                self.timed_out += 1
            await asyncio.sleep(self.hang)
            raise web.HTTPServiceUnavailable()
        prompt = str(body["messages"][-1].get("content"))
        seed = int(body.get("seed") or 0)
        texts = [scripted_reply(body["messages"], seed + c) for c in range(int(body.get("n", 1)))]
        tokens = [len(t.split()) for t in texts]
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        try:
            self._busy_change(+1)
            try:
                await asyncio.sleep(self.latency + self.per_token * max(tokens))
            finally:
                self._busy_change(-1)
        finally:
            self._sem.release()
        await self._open.wait()
        if request.transport is None or request.transport.is_closing():  # the client left: nothing done
            with self._lock:
                self.dropped += 1
            raise web.HTTPServiceUnavailable()
        choices = [{"index": c, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                   for c, t in enumerate(texts)]
        with self._lock:
            self.completed += 1
            self.completed_by_key[key] += 1
            self.last_at = now = time.monotonic()
            if self._phase is not None:
                self._phase[2], self._phase[3] = now, self._busy_now(now)
            if self.keep_bodies:
                self.bodies.append(body)
                self.body_phases.append(len(self.phases))
        return web.json_response({"object": "chat.completion", "model": self.model, "choices": choices,
                                  "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": sum(tokens)}})

    # -- control ------------------------------------------------------------------------------
    async def _drop(self) -> None:
        handlers = list(self._handlers)
        with self._lock:
            self.dropped += len(handlers)
        for t in handlers:
            t.cancel()
        await self._runner.cleanup()

    def restart(self, down: float = 1.0) -> None:
        """Drop every connection and request in flight, refuse connections for `down` seconds,
        then serve again on the same port (blocks until it does)."""
        self._call(self._drop())
        time.sleep(down)
        self._call(self._listen(self.port))

    def restart_later(self, after: float, down: float = 1.0) -> threading.Thread:
        """`restart(down)` in `after` seconds, from a thread of its own."""
        t = threading.Thread(target=lambda: (time.sleep(after), self.restart(down)), daemon=True)
        t.start()
        return t

    def pause(self) -> None:
        """Take requests but answer none (they stay received, not completed) until `resume`."""
        self._loop.call_soon_threadsafe(self._open.clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    def stop(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._drop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> "StandinEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stats(self) -> dict:
        return {"received": self.received, "completed": self.completed, "answered_503": self.answered_503,
                "timed_out": self.timed_out, "dropped": self.dropped, "repaid": self.repaid,
                "twice_completed": self.twice_completed(), "max_busy": self.max_busy}


def main() -> None:
    """`python -m generators.llm.standin_engine --slots 256 --latency 1`: serve until killed."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("slots", 256), ("latency", 1.0), ("per-token", 0.0), ("fail-503", 0.0),
                          ("timeouts", 0.0)):
        p.add_argument(f"--{name}", type=type(default), default=default)
    a = p.parse_args()
    engine = StandinEngine(a.slots, a.latency, a.per_token, a.fail_503, a.timeouts)
    print(json.dumps({"url": engine.url}), flush=True)
    try:
        while True:
            time.sleep(5)
            print(json.dumps(engine.stats()), flush=True)
    except KeyboardInterrupt:
        engine.stop()


if __name__ == "__main__":
    main()
