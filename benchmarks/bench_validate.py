"""Benchmark the schema + rule layers (records/s) on N trajectories made by replicating
synthesized ones with new ids; replay is off (no corpus). Three ways, in the same run:
a raw loop in one process, a raw ProcessPoolExecutor, and the real `validate` flow
(flows.validate.run: reads the shards, runs the chunk tasks on its task runner, commits
verdicts and accepted shards) with --workers 1 and with --workers N; each with records/s
and its ratio to the raw one-process loop. Then the flow on each distributed task runner of
--runners (a local cluster of --workers workers, started and stopped inside the run), with
its ratios to the default runner's one-worker flow and N-process flow. The raw loop and the one-worker flow run
--repeat times alternately; the medians and their ratio come last. With --judge K, also
the judge layer on K records with the embedded model: records/s and tokens/s against the
same backend generating the same judge prompts raw (the peer).

    .venv/bin/python benchmarks/bench_validate.py --n 100000 --workers 2 --judge 8
    .venv/bin/python benchmarks/bench_validate.py --n 100000 --workers 2 --repeat 1 --runners dask,ray
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


def _work(rows: list[dict]) -> int:
    from validators.trajectory_rules import RuleContext, check_trajectory
    from validators.schema_layer import check_schema

    ctx, n = RuleContext(replay=False), 0
    for r in rows:
        if check_schema(r, "trajectories").passed and check_trajectory(r, ctx)[-1].passed:
            n += 1
    return n


def make_rows(n: int) -> list[dict]:
    from generators.corpus.build import WorldConfig, write
    from generators.synth.synthesize import Session, SynthConfig, load_inputs
    from generators.tools.bank import build_bank
    from generators.llm.scripted import ScriptedBackend

    root = tempfile.mkdtemp()
    write(WorldConfig(seed=3, entities=300), root, "w")
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=200), build_bank(seed=3, variants_per_tool=1))
    base, _ = s.trajectories(s.plans(), ScriptedBackend(), "run")
    return [dict(base[i % len(base)], id=f"r{i}", traj_id=f"t{i}") for i in range(n)]


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
    rows = make_rows(a.n)
    root = committed_root(rows)
    ones, flows = [], []
    for r in range(a.repeat):  # alternating, so a slower spell of the machine hits both sides
        t = time.perf_counter()
        passed = _work(rows)
        ones.append(a.n / (time.perf_counter() - t))
        flows.append(flow_bench(root, a.n, 1, ones[-1], a.chunk))
        print(json.dumps({"repeat": r, "passed": passed, "records_per_s_one_process": round(ones[-1]), **flows[-1]}), flush=True)
    one, flow_1 = statistics.median(ones), statistics.median(f["records_per_s_flow"] for f in flows)
    print(json.dumps({"n": a.n, "repeats": a.repeat, "median_records_per_s_one_process": round(one),
                      "median_records_per_s_flow_1_worker": round(flow_1),
                      "flow_1_worker_vs_one_process": round(flow_1 / one, 3)}), flush=True)
    setting = f"{a.n:,} trajectories, schema + rules"
    record("validate flow, 1 worker", [f["records_per_s_flow"] for f in flows], "raw loop, one process", ones,
           "records/s", paired=True, setting=setting)
    if a.workers > 1:
        parts = [rows[i::a.workers] for i in range(a.workers)]
        t = time.perf_counter()
        with ProcessPoolExecutor(a.workers) as ex:
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


def committed_root(rows: list[dict]) -> str:
    """A data root with `rows` committed as dataset "b" (passed to the writer as Arrow: the
    rows are schema-valid by construction, so the writer checks only types)."""
    import pyarrow as pa

    from storage import ShardWriter, load_schema
    from storage.shards import stamp

    schema = load_schema("trajectories")
    root = tempfile.mkdtemp()
    with ShardWriter(root, "b", "trajectories", "bench") as w:
        w.write(pa.Table.from_pylist(stamp(rows, schema, "bench"), schema=schema.arrow))
    return root


def flow_bench(root: str, n: int, workers: int, one_process: float, chunk: int, runner: str = "default") -> dict:
    """The validate flow (schema,rules) over dataset "b" of a copy of `root` on task runner
    `runner`; records/s inside the flow (a distributed runner's local cluster starts before
    it, its workers import the task's modules within it) and around it (incl. Prefect's and
    the cluster's start), and seconds per phase."""
    from flows.runners import RunnerConfig
    from flows.validate import run
    from validators.runner import ValidateConfig

    copy = tempfile.mkdtemp()
    shutil.copytree(root, copy, dirs_exist_ok=True)
    t = time.perf_counter()
    s = run(ValidateConfig(dataset="b", layers="schema,rules", replay=False, workers=workers, chunk=chunk),
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
