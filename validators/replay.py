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
    verdict = replay(parsed, ctx, meta)          # ok / replay_mismatch / retriever_changed / replay_failed
    ctx.forget()                                 # the batch's answers are not kept

A call that does not replay is `retriever_changed`, not `replay_mismatch`, when the retriever
is not the one that answered it: another kind (meta.retriever, bm25 when absent), another
index fingerprint (both known), or other results for the call's search than the hash the
synthesizer recorded in its replay key (`retrieved`; how a server that reports no
fingerprint is checked). Messages that replay byte for byte pass whatever the retriever.
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


def replay(parsed, ctx, meta: dict, plain: dict | None = None) -> Verdict:
    """The replay step's verdict for a parsed trajectory (module docstring). `plain` gets,
    by the id of each tool message that replayed, the plain text the batch has of it
    (`RuleContext.texts`), for the grounding step."""
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
                why = retriever_change(meta, key, ctx, int(seed), c.name, c.args)
                if why:
                    return fail(LAYER, "replay", "retriever_changed", detail={"call": c.id, "why": why})
                return fail(LAYER, "replay", "replay_mismatch", detail={"call": c.id, "tool": c.name})
            if plain is not None and ctx.texts and out in ctx.texts:
                plain[id(t)] = ctx.texts[out]  # (`out` is the batch's own key: found without reading it)
            n += 1
    return ok(LAYER, "replay", detail={"calls": n})


def retriever_change(meta: dict, key: dict, ctx, seed: int, name: str, args: Any) -> str | None:
    """Why the retriever replaying a call is not the one that answered it, or None (module docstring)."""
    from generators.tools.retriever import kind_of

    then = meta.get("retriever") if isinstance(meta.get("retriever"), dict) else {"retriever": "bm25"}
    now = ctx.retriever_of(seed)
    if kind_of(str(then.get("retriever"))) != kind_of(now["retriever"]):
        return f"recorded with the {then.get('retriever')} retriever, replayed with {now['retriever']}"
    if then.get("fingerprint") and now["fingerprint"] and then["fingerprint"] != now["fingerprint"]:
        return f"the {now['retriever']} index changed: fingerprint {then['fingerprint']}, now {now['fingerprint']}"
    if isinstance(key, dict) and key.get("retrieved") and ctx.retrieved(seed, name, args, key) != key["retrieved"]:
        return f"the {now['retriever']} retriever's results for this call's search changed"
    return None
