"""Benchmark validation as users run it: the default layers (schema, rules with replay of every
tool call and grounding, dedup) over N synthesized trajectories of a world corpus (template
texts, several per triple), committed with the world's documents and tool bank so replay runs.
Three ways, in the same run: a raw loop in one process (the same checks called directly), a raw
ProcessPoolExecutor of the per-record checks, and the real `validate` flow (flows.validate.run:
reads the shards, runs the chunk tasks on its task runner, commits verdicts and accepted shards)
with --workers 1 and with --workers N; each with records/s and its ratio to the raw one-process
loop. A second row, labelled as stripped, runs the flow with replay off and no dedup (what this
benchmark measured before). Then the flow on each distributed task runner of --runners (a local
cluster of --workers workers, started and stopped inside the run), with its ratios to the default
runner's one-worker flow and N-process flow. The raw loop and the one-worker flow run --repeat
times alternately; the medians and their ratio come last. With --judge K, also the judge layer
on K records with the embedded model: records/s and tokens/s against the same backend generating
the same judge prompts raw (the peer).

    .venv/bin/python benchmarks/bench_validate.py --n 20000 --workers 2 --judge 8
    .venv/bin/python benchmarks/bench_validate.py --n 20000 --workers 2 --repeat 1 --runners dask,ray
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import json
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

from comparisons import record


def _work(args: tuple[str, list[dict]]) -> int:
    """The default layers' checks over rows, called directly: schema, rules (replay through the
    dataset's corpus, grounding) and, in one process, dedup; the records that pass."""
    from validators.context import corpus_fingerprint, rule_context
    from validators.dedup import Deduper, _check
    from validators.schema_layer import check_schema
    from validators.trajectory_rules import check_trajectories

    root, rows = args
    ctx = rule_context(root, "b", corpus_fingerprint(root, "b"))
    dedup, n = Deduper(), 0
    for i in range(0, len(rows), 2000):
        part = [r for r in rows[i:i + 2000] if check_schema(r, "trajectories").passed]
        for r, vs in zip(part, check_trajectories(part, ctx)):
            n += vs[-1].passed and _check(dedup, r["id"], r, "trajectories").passed
    return n


def make_rows(n: int, root: str) -> list[dict]:
    """n template trajectories of a world with enough triples (several per triple), with the
    world, its tool bank and the trajectories committed as dataset "b" under `root`."""
    from generators.corpus.build import WorldConfig, write
    from generators.synth.synthesize import Session, SynthConfig, load_inputs
    from generators.tools.bank import build_bank
    from storage import write_rows

    entities = max(2000, n // 4)
    write(WorldConfig(seed=3, entities=entities), root, "b")
    bank = build_bank(seed=3, variants_per_tool=1)
    s = Session(load_inputs(root, "b"), SynthConfig(dataset="b", n=n, texts="template",
                                                    per_triple=-(-n // (entities // 2))), bank)
    rows, _ = s.trajectories(s.plans(), None, "run")
    write_rows(root, "b", "tools", "bank", bank)
    write_rows(root, "b", "trajectories", "run", rows)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=100_000, help="trajectories to validate")
    ap.add_argument("--workers", type=int, default=2, help="processes in the pool run")
    ap.add_argument("--chunk", type=int, default=2000, help="records per chunk task in the flow runs")
    ap.add_argument("--runners", default="dask",
                    help="comma list of distributed task runners to compare with the default one ('' = none)")
    ap.add_argument("--judge", type=int, default=0, help="records for the judge-layer run (0 = skip)")
    ap.add_argument("--judge-max-tokens", type=int, default=48, help="tokens per judge reply")
    ap.add_argument("--repeat", type=int, default=3,
                    help="pairs of (raw loop, one-worker flow) run alternately; medians and their ratio are printed")
    a = ap.parse_args()
    root = tempfile.mkdtemp()
    rows = make_rows(a.n, root)
    ones, flows = [], []
    for r in range(a.repeat):  # alternating, so a slower spell of the machine hits both sides
        t = time.perf_counter()
        passed = _work((root, rows))
        ones.append(a.n / (time.perf_counter() - t))
        flows.append(flow_bench(root, a.n, 1, ones[-1], a.chunk))
        print(json.dumps({"repeat": r, "passed": passed, "records_per_s_one_process": round(ones[-1]), **flows[-1]}), flush=True)
    one, flow_1 = statistics.median(ones), statistics.median(f["records_per_s_flow"] for f in flows)
    print(json.dumps({"n": a.n, "repeats": a.repeat, "median_records_per_s_one_process": round(one),
                      "median_records_per_s_flow_1_worker": round(flow_1),
                      "flow_1_worker_vs_one_process": round(flow_1 / one, 3)}), flush=True)
    setting = f"{a.n:,} trajectories, default layers (replay, grounding, dedup)"
    record("validate flow, 1 worker", [f["records_per_s_flow"] for f in flows], "raw loop, one process", ones,
           "records/s", paired=True, setting=setting)
    stripped = flow_bench(root, a.n, 1, one, a.chunk, layers="schema,rules", replay=False)
    print(json.dumps({"stripped": "replay off, no dedup", **stripped}), flush=True)
    record("validate flow, 1 worker, stripped: replay off, no dedup", stripped["records_per_s_flow"],
           "validate flow, 1 worker, default layers", flow_1, "records/s", setting=f"{a.n:,} trajectories")
    if a.workers > 1:
        parts = [(root, rows[i::a.workers]) for i in range(a.workers)]
        t = time.perf_counter()
        with ProcessPoolExecutor(a.workers) as ex:  # (each part deduplicated on its own: a raw peer)
            passed_pool = sum(ex.map(_work, parts))
        pool = a.n / (time.perf_counter() - t)
        print(json.dumps({"passed_pool": passed_pool, "records_per_s_pool": round(pool), "workers": a.workers,
                          "pool_vs_one_process": round(pool / one, 3)}), flush=True)
        pooled = flow_bench(root, a.n, a.workers, one, a.chunk)
        print(json.dumps(pooled), flush=True)
        record(f"raw process pool, {a.workers} workers", pool, "raw loop, one process", one, "records/s",
               setting=setting)
        record(f"validate flow, {a.workers} workers", pooled["records_per_s_flow"], "raw loop, one process", one,
               "records/s", setting=setting)
        for kind in filter(None, a.runners.split(",")):
            other = flow_bench(root, a.n, a.workers, one, a.chunk, kind)
            print(json.dumps({**other, f"{kind}_vs_flow_1_worker": round(other["records_per_s_flow"] / flow_1, 3),
                              f"{kind}_vs_flow_{a.workers}_processes":
                                  round(other["records_per_s_flow"] / pooled["records_per_s_flow"], 3)}), flush=True)
            record(f"validate flow on {kind}, {a.workers} workers", other["records_per_s_flow"],
                   f"validate flow, {a.workers} processes", pooled["records_per_s_flow"], "records/s", setting=setting)
    shutil.rmtree(root, ignore_errors=True)
    if a.judge:
        judged = judge_bench(rows[:a.judge], a.judge_max_tokens)
        print(json.dumps(judged))
        record("judge layer", judged["judge"]["tokens_per_s"], "raw generation of its prompts",
               judged["raw"]["tokens_per_s"], "tokens/s", setting=f"{a.judge} records")


def flow_bench(root: str, n: int, workers: int, one_process: float, chunk: int, runner: str = "default",
               layers: str = "schema,rules,dedup", replay: bool = True) -> dict:
    """The validate flow (by default its default layers) over dataset "b" of a copy of `root` on
    task runner `runner`; records/s inside the flow (a distributed runner's local cluster starts
    before it, its workers import the task's modules within it) and around it (incl. Prefect's
    and the cluster's start), and seconds per phase."""
    from flows.runners import RunnerConfig
    from flows.validate import run
    from validators.validator import ValidateConfig

    copy = tempfile.mkdtemp()
    shutil.copytree(root, copy, dirs_exist_ok=True)
    t = time.perf_counter()
    s = run(ValidateConfig(dataset="b", layers=layers, replay=replay, workers=workers, chunk=chunk),
            data_root=copy, progress=False, runner=RunnerConfig(task_runner=runner))
    wall = time.perf_counter() - t
    shutil.rmtree(copy, ignore_errors=True)
    return {"flow_workers": workers, "task_runner": runner, "n": n, "accepted": s["rows_out"], "chunk": chunk,
            "records_per_s_flow": round(s["records_per_s"]), "flow_vs_one_process": round(s["records_per_s"] / one_process, 3),
            "records_per_s_incl_prefect_start": round(n / wall), "seconds_by_phase": s["seconds_by_phase"]}


def judge_bench(rows: list[dict], max_tokens: int) -> dict:
    """The judge layer vs raw generation of the same prompts on the same backend."""
    from generators.llm.base import ChatRequest
    from generators.llm.registry import BackendConfig, make_backend
    from validators.judge import judge_records, turn_prompts

    be = make_backend(BackendConfig(batch_size=32))
    be.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0.0)])
    reqs = [ChatRequest(messages=[{"role": "user", "content": p}], n=1, temperature=0.0, max_tokens=max_tokens)
            for r in rows for p in turn_prompts(r)]
    out = {}
    for name, fn in (("raw", lambda: be.generate(reqs)), ("judge", lambda: judge_records(rows, be, max_tokens=max_tokens))):
        before = be.usage.completion_tokens
        t = time.perf_counter()
        fn()
        dt_ = time.perf_counter() - t
        out[name] = {"records_per_s": len(rows) / dt_, "tokens_per_s": (be.usage.completion_tokens - before) / dt_}
    out["judge_vs_raw_tokens_per_s"] = out["judge"]["tokens_per_s"] / out["raw"]["tokens_per_s"]
    out["records"], out["turns"] = len(rows), len(reqs)
    return out


if __name__ == "__main__":
    main()
