"""How many requests an HTTP backend keeps in flight, per endpoint, and who goes next.

`AdaptiveLimit` adapts the number to the server, a window at a time (a window is half as
many answers as the limit; after a decrease, the answers to requests sent before it are not
counted): it doubles while the server keeps up (latency per token within
`tolerance` of the best seen and the limit was reached), then grows by a sixteenth; when
latency rises past that it shrinks in proportion (to tolerance x best / latency, at most
by half), and by 0.7 when more than `overload_share` (a
quarter) of a window's answers were 429, 503 or timeouts; never below FLOOR (8, what the
client kept in flight before it adapted). A few 503s spread at random (a flaky proxy: 5%
of answers rarely make a quarter of a window) do not shrink it; an overloaded server that
answers many requests 503 or slowly does. A fixed limit (`fixed=True`) never moves.

Where the server states its own load (generators/llm/server_load.py: vLLM's and SGLang's
`/metrics`), that decides instead of latency (`report`, a reading every quarter second while
requests are in flight): while the server queues nothing and the endpoint uses all its room,
the limit doubles at once; once it queues, the limit becomes what the server runs of ours
plus a half (a queue that refills the slots that free while the client is busy elsewhere:
with an eighth, a synthesis at 64 slots kept the engine 84% busy, against 99% when latency
decided and let such a queue grow). So a server of 256 sequences is filled in about a
second from 64, and not flooded. 429s and 503s still shrink it.

An endpoint that refused or dropped a connection is down (`mark_down`: a restart, a server
that went away): until it answers again (`mark_up`) it takes one request at a time,
the probe, and the others wait in the queue (or go to other endpoints) instead of each
retrying against a closed port; its limit is kept for when it is back (the openai backend's
probe asks for the server's model list at a steady pace, so one back from a restart is used at
once).

`Slots` hands out endpoints in arrival order (retries first) to whoever waits, each
endpoint up to its limit, the emptiest first, so requests spread over several servers.

    limits = [AdaptiveLimit(start=64) for _ in urls]
    slots = Slots(limits)
    k = await slots.acquire()          # an endpoint index
    ...; limits[k].observe(seconds / tokens, overload=False); slots.release(k)
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque

START = 64  # requests in flight per endpoint before the server has answered anything
CEILING = 4096
FLOOR = 8  # never fewer in flight per endpoint (a server that slowed for good is not starved)


class AdaptiveLimit:
    """Requests in flight one endpoint may have (see the module docstring)."""

    def __init__(self, start: int = START, low: int = FLOOR, high: int = CEILING, fixed: bool = False,
                 tolerance: float = 1.5, overload_share: float = 0.25):
        self.value = float(start)
        self.low, self.high, self.fixed = min(low, int(start)), high, fixed
        self.tolerance, self.overload_share = tolerance, overload_share
        self.base: float | None = None  # the best window's median latency per token
        self.slow_start = True
        self.inflight = 0
        self.peak = 0  # most in flight during this window
        self._latencies: list[float] = []
        self._overloads = 0
        self._skip = 0
        self.changes = 0
        self.reported = False  # the server states its load (`report`): latency no longer decides
        self.down = False  # refused or dropped a connection; one request at a time until one succeeds
        self.down_since = 0.0  # when it went down
        self.probing = False  # a request holds the one slot of a down endpoint and tries it again

    @property
    def limit(self) -> int:
        return max(self.low, int(self.value))

    def has_room(self) -> bool:
        return self.room() > 0

    def room(self) -> int:
        """Requests it may take now: one probe at a time while it is down."""
        return (1 if self.down else self.limit) - self.inflight

    def mark_down(self) -> None:
        if not self.down:
            self.down, self.down_since = True, time.monotonic()

    def mark_up(self) -> None:
        self.down = self.probing = False

    def enter(self) -> None:
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)

    def leave(self) -> None:
        self.inflight -= 1

    def observe(self, latency: float | None, overload: bool = False) -> None:
        """One answer: its latency per token (None when it failed), and whether it was an
        overload signal (429, 503, a timeout)."""
        if self._skip > 0:  # sent before the last decrease: says nothing about the new limit
            self._skip -= 1
            return
        if latency is not None:
            self._latencies.append(latency)
        self._overloads += bool(overload)
        if len(self._latencies) + self._overloads >= max(8, self.limit // 2):
            self._decide()

    def report(self, running: int, waiting: int) -> None:
        """What the server says of its load now (module docstring): the requests it runs and
        those it queues, of every client. A page that does not count this endpoint's requests
        (fewer running and waiting than half of those in flight: gauges that are not kept, as
        with vLLM's --disable-log-stats) says nothing of them and is left aside."""
        if self.fixed or self.down or self.inflight == 0 or running + waiting < self.inflight // 2:
            return
        self.reported = True
        before = self.value
        if waiting > 0:
            ours = max(1, min(running, self.inflight - waiting))  # (what it runs of ours, if all it queues is ours)
            self.value = max(float(self.low), min(self.value, float(ours + max(1, ours // 2))))
            self.slow_start = False
        elif waiting == 0 and self.inflight >= self.limit:
            self.value = min(float(self.high), self.value * 2)
        self._moved(before)

    def _moved(self, before: float) -> None:
        """Counts a change of the limit; after a decrease, the answers to requests sent before it
        are not counted."""
        self.changes += self.value != before
        if self.value < before:
            self._skip = self.inflight

    def _decide(self) -> None:
        answers = len(self._latencies) + self._overloads
        median = statistics.median(self._latencies) if self._latencies else None
        saturated = self.peak >= self.limit
        before = self.value
        if not self.fixed:
            if self._overloads > self.overload_share * answers:
                self.value, self.slow_start = max(self.low, self.value * 0.7), False
            elif self.reported:
                pass  # (the server's own load decides: `report`)
            elif median is not None and self.base is not None and median > self.tolerance * self.base:
                shrink = max(0.5, self.tolerance * self.base / median)  # back to where latency held
                self.value, self.slow_start = max(self.low, self.value * shrink), False
            elif saturated:
                grown = self.value * 2 if self.slow_start else self.value + max(1.0, self.value / 16)
                self.value = min(float(self.high), grown)
        if median is not None:  # the best seen: what the server does when it is not queueing
            self.base = median if self.base is None else min(median, self.base)
        self._moved(before)
        self._latencies, self._overloads, self.peak = [], 0, self.inflight


class Slots:
    """A first-come queue for the endpoints' room (see the module docstring)."""

    def __init__(self, limits: list[AdaptiveLimit]):
        self.limits = limits
        self._waiting: deque[asyncio.Future] = deque()

    def _pick(self) -> int | None:
        best, room = None, 0.0
        for k, lim in enumerate(self.limits):
            free = lim.room() / lim.limit if not lim.down else lim.room() / lim.limit / 2  # up ones first
            if free > room:
                best, room = k, free
        return best

    async def acquire(self, first: bool = False) -> int:
        """An endpoint with room, in arrival order (`first`: ahead of the queue, for retries)."""
        if not self._waiting:
            k = self._pick()
            if k is not None:
                self.limits[k].enter()
                return k
        fut = asyncio.get_running_loop().create_future()
        (self._waiting.appendleft if first else self._waiting.append)(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot as it was cancelled: give it back
                self.release(fut.result())
            else:
                self._waiting.remove(fut)
            raise

    def release(self, k: int) -> None:
        self.limits[k].leave()
        self.wake()

    def wake(self) -> None:
        """Hand free room to the waiters, oldest first (also after a limit grew)."""
        while self._waiting:
            k = self._pick()
            if k is None:
                return
            fut = self._waiting.popleft()
            if fut.done():
                continue
            self.limits[k].enter()
            fut.set_result(k)

    @property
    def limit(self) -> int:
        return sum(lim.limit for lim in self.limits)
