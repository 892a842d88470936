"""A synthesis run as an algorithm; flows/synthesize.py runs it as a Prefect flow, its chunks
as tasks. This module decides the run's id (`run_id_of`: what makes its rows, so a rerun of
the same config resumes it), its lineage, the tool bank it offers (`build_bank`), how its
chunks' model requests stream to the backend (`streamed`), how a chunk's rows are finished
and committed (`chunk_rows`), and which writer commits them (`committer`).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # (the builtin TimeoutError only from Python 3.11)
from dataclasses import asdict
from itertools import islice
from typing import Callable

from generators.llm.base import Streaming, submit
from generators.llm.registry import BackendConfig
from generators.synth.synth_config import LATER_DEFAULTS
from generators.synth.synthesize import Session, SynthConfig
from generators.synth.tally import mix_report
from storage import ShardWriter, write_rows
from storage.resumable import RunWriter
from storage.runs import config_hash, without_later_defaults

TEMPLATE_SHARD = 5000  # trajectories a shard of template texts holds (committer)


def run_id_of(cfg: SynthConfig, bcfg: BackendConfig, imported: list[dict], bank: str) -> str:
    """The run's id: `cfg.run_id`, else a hash of what decides its rows (the synthesis options
    but --allow-fewer, the backend, the imported tools, the bank and the held-out ids)."""
    from generators.tools.banks import choice_key

    keyed = {"synth": without_later_defaults({k: v for k, v in asdict(cfg).items() if k != "allow_fewer"},
                                             LATER_DEFAULTS),
             "backend": bcfg.config_hash()}
    if imported:  # new imports make a new run; without any, run ids stay what they were
        keyed["imported_tools"] = [t["tool_id"] for t in imported]
    if bank != "world":  # the bank a run offered before --tools existed keeps its run ids
        keyed["tools"] = choice_key(bank)
    if cfg.hold_out:  # the ids make the run too: the same file with other ids is another split
        keyed["held_out"] = sorted(cfg.held_out())
    return cfg.run_id or f"synth-{config_hash(keyed)}"


def lineage_of(cfg: SynthConfig, bcfg: BackendConfig, backend) -> dict:
    """The lineage every row of the run carries (its parent triple is added per row)."""
    return {"model": str(backend.model or bcfg.model) if backend else None,
            "backend": bcfg.backend if backend else None, "config_hash": config_hash(asdict(cfg)), "parent_ids": []}


def chunk_rows(rows: list[dict], lineage: dict, triple_ids: dict, stats: dict,
               commit: Callable[[list[dict]], int]) -> dict:
    """Commit a chunk's rows, each with its lineage and parent triple; `stats` with the write
    time and the chunk's case and route mix."""
    t = time.perf_counter()
    commit([{**r, "lineage": {**lineage, "parent_ids": [triple_ids[r["triple_id"]]]}} for r in rows])
    stats["write_s"] = time.perf_counter() - t
    stats["mix"] = mix_report(rows)
    return stats


def run_summary(cfg: SynthConfig, run_id: str, session: Session, tally, planned: int, written: int, usage: dict,
                wall: float) -> dict:
    """What a run made (counts, mixes, text sources, usage, timing): the flow's summary and
    the run record's."""
    return {"run_id": run_id, "dataset": cfg.dataset, "asked": cfg.n, "planned": planned, "written": written,
            "skipped_committed": planned - written, "capacity": session.capacity(),
            "triples_in_use": session.triples_in_use(), "per_triple": cfg.per_triple,
            "case": dict(tally.case), "route": dict(tally.route),
            "text_sources": dict(tally.sources), "fallbacks": dict(tally.fallbacks),
            "texts_by_slot": tally.slot_report(), "usage": usage,
            "seconds": wall, "llm_seconds": tally.llm_s,
            "program_fraction": (wall - tally.llm_s) / wall if wall else 0.0,
            "unplannable": dict(session.rejected)}


def build_bank(root: str, dataset: str, run_id: str, seed: int, variants: int, lineage: dict, imported: list,
               backend=None, calculator: bool = False, choice: str = "world", documents: list | None = None):
    """The bank `choice` names (generators/tools/banks.py; world: gated), written as this run's
    `tools`, plus the dataset's imported tools."""
    from generators.tools.bank import generate_bank
    from generators.tools.compute import calculator_row

    if choice == "world":
        build = generate_bank(seed=seed, variants_per_tool=variants, backend=backend,
                              reserved_names=[t["name"] for t in imported], calculator=calculator)
        rows, reasons = build.tools, build.reasons()
    else:
        from pathlib import Path

        from generators.tools.banks import file_bank
        from generators.tools.corpus_bank import corpus_bank

        rows = corpus_bank(documents or []) if choice == "corpus" else file_bank(Path(choice))
        rows = rows + ([calculator_row()] if calculator else [])
        reasons = {f"{choice if choice == 'corpus' else 'file'} tools": len(rows)}
    write_rows(root, dataset, "tools", run_id, rows, lineage=lineage)
    return rows + imported, reasons


def streamed(session: Session, todo, backend, size: int):
    """(chunk size, prepared chunk, its answers, seconds waited for them: a backend in this
    process answers when the chunk is handed to it, and that counts), chunk by chunk in
    order. A streaming backend gets the next chunks' requests while it answers the earlier
    ones (up to twice its concurrency queued), so the engine never waits on a chunk's end or
    a commit; any other backend answers one chunk at a time."""
    depth = (lambda: 2 * backend.max_concurrency) if isinstance(backend, Streaming) else (lambda: 0)
    in_flight, queued, more, waited = deque(), 0, True, 0.0
    try:
        while True:
            while more and (not in_flight or queued < depth()):
                chunk = list(islice(todo, size))
                if not chunk:
                    more = False
                    break
                prep = session.prepare(chunk)
                t = time.perf_counter()
                if backend is None or not prep.requests:
                    fut = Future()
                    fut.set_result(None if backend is None else [])
                else:
                    fut = submit(backend, prep.requests)  # (a backend in this process answers here)
                in_flight.append((len(chunk), prep, fut, time.perf_counter() - t))
                queued += len(prep.requests)
            if not in_flight:
                return
            n, prep, fut, answering = in_flight[0]
            t = time.perf_counter()
            try:  # not for long: the backend's concurrency may grow meanwhile, and more may be queued
                outs = fut.result(timeout=0.25)
            except FutureTimeout:
                waited += time.perf_counter() - t
                continue
            in_flight.popleft()
            queued -= len(prep.requests)
            yield n, prep, outs, answering + waited + time.perf_counter() - t
            waited = 0.0
    finally:
        for _, _, fut, _ in in_flight:
            fut.cancel()


def committer(root: str, dataset: str, run_id: str, lineage: dict, texts: str) -> ShardWriter | RunWriter:
    """The flow process's writer of a run's trajectories: model-written texts are committed chunk
    by chunk (paid work is kept at once); template texts, cheap to make again, in shards of
    TEMPLATE_SHARD rows (a few commits for a large run; a kill redoes at most one shard)."""
    if texts == "template":
        return ShardWriter(root, dataset, "trajectories", run_id, lineage=lineage, rows_per_shard=TEMPLATE_SHARD)
    return RunWriter(root, run_id, lineage)
