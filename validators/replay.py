"""The rules layer's `replay` step: every tool message of a trajectory must be what the
simulator answers for its call (tool, arguments and the replay key the synthesizer recorded in
`meta.calls`), byte for byte.

Replay is batched: before a chunk's records reach the replay step, `prefetch` collects the
calls of every record that got that far and asks the simulator for all of them at once
(`Simulator.answers`: one batched search over the index, identical calls answered once).
The replay step then reads the answers from that batch, and a record's verdicts are exactly
what replaying its calls one by one gives (`tests/validators/test_replay_batch.py`).

    requests = replay_requests(parsed, meta)     # [(seed, tool, arguments, key)], in call order
    ctx.prefetch(requests)                       # one batch per seed
    verdict = replay(parsed, ctx, meta)          # ok / replay_mismatch / replay_failed
    ctx.forget()                                 # the batch's answers are not kept
"""

from __future__ import annotations

import json
from typing import Any

from validators.verdict import Verdict, fail, ok

LAYER = "rules"


def request_key(seed: int, name: str, args: Any, key: dict) -> str:
    """The text that names one replayed call (equal calls, equal keys)."""
    return json.dumps([seed, name, args, key], sort_keys=True, default=str)


def replay_requests(parsed, meta: dict) -> list[tuple[int, str, Any, dict]]:
    """(seed, tool, arguments, replay key) of each call the replay step will ask for, in order,
    up to the first call that cannot be replayed (no key, no seed)."""
    calls_meta, seed = meta.get("calls") or {}, meta.get("seed")
    out = []
    for calls, tools in zip(parsed.turns, parsed.tool_msgs):
        for c, _ in zip(calls, tools):
            key = calls_meta.get(c.id) if c.id else None
            if key is None or seed is None:
                return out
            try:
                out.append((int(seed), c.name, c.args, key))
            except (TypeError, ValueError):
                return out
    return out


def replay(parsed, ctx, meta: dict) -> Verdict:
    """The replay step's verdict for a parsed trajectory (module docstring)."""
    if not ctx.replay or ctx.simulator_for is None:
        return ok(LAYER, "replay", reason="replay_skipped_no_corpus")
    calls_meta = meta.get("calls") or {}
    seed = meta.get("seed")
    n = 0
    for calls, tools in zip(parsed.turns, parsed.tool_msgs):
        for c, t in zip(calls, tools):
            key = calls_meta.get(c.id) if c.id else None
            if key is None or seed is None:
                return fail(LAYER, "replay", "replay_failed", detail={"call": c.id, "why": "no replay key"})
            try:
                out = ctx.replay_call(int(seed), c.name, c.args, key)
            except (ValueError, KeyError, TypeError) as e:
                return fail(LAYER, "replay", "replay_failed", detail={"call": c.id, "why": str(e)[:200]})
            if out != t["content"]:
                return fail(LAYER, "replay", "replay_mismatch", detail={"call": c.id, "tool": c.name})
            n += 1
    return ok(LAYER, "replay", detail={"calls": n})
