"""The data path at users' scale, as a user runs it: on a world of >= 50,000 documents, for each
size N, `forgeplay synthesize --texts template --n N`, `forgeplay validate` with the default
layers (schema, rules with replay and grounding, dedup), three catalog queries with `forgeplay
sql`, `forgeplay verify` and `forgeplay export verl --tool-agent`, each its own process as typed at a shell:
wall seconds, records/s and peak RSS per stage, and the cost per record at the largest size
against the smallest. Floors, measured in the same run on the same data:

  replay    Simulator.answers over the calls of up to 10,000 trajectories (what validation asks)
            against bm25s retrieving the same queries in one batch, and against bm25s's scoring
            of each query alone (no top-k selection: on queries of a name or two, most documents
            score 0 and bm25s's argpartition is slow, so retrieval is a weak peer)
  grounding the rules layer's grounding step over 10,000 trajectories, timed within the layer,
            against the whole rules layer over them (its share: the target is <= 10%); and `ground`
            alone over the same records (splitting their thinks itself, which the layer's format
            step does for it)
  commit    RunWriter.commit of 10,000 trajectory rows (what synthesis does with a chunk)
            against pyarrow building and writing the same rows (from_pylist + pq.write_table)
  queries   the catalog's views (`forgeplay sql`'s) against DuckDB reading the same Parquet files
  start     `forgeplay sql "SELECT 1"`, `forgeplay --help` and a missing dataset's error against
            starting Python itself

Each size starts with the data root's kept indexes removed (generators/tools/bm25_saved.py):
synthesis builds the corpus's BM25 index, and the stages after it read it back, as on a new corpus.
At sizes below --repeat-below, synthesis and validation run --repeat times from the same state
(the median kept, every run listed): a 10^4 validation varies by 10% from run to run here.

The 10^6 figure is measured when 1000000 is among --sizes; otherwise each stage's per-record
cost at the largest size measured is multiplied out, and the table says so.

    .venv/bin/python benchmarks/bench_scale.py                                  # make bench-scale
    .venv/bin/python benchmarks/bench_scale.py --entities 50000 --sizes 10000,100000 --out experiments/results/bench_scale.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from comparisons import record  # noqa: E402

CLI = [sys.executable, "-m", "flows.cli"]
QUERIES = {
    "count": "SELECT count(*) FROM {ds}_valid_trajectories",
    "rejects": "SELECT layer, reason, count(*) FROM {ds}_verdicts WHERE NOT passed GROUP BY ALL ORDER BY 3 DESC",
    "mix": "SELECT route, \"case\", count(*) FROM {ds}_valid_trajectories GROUP BY ALL ORDER BY 3 DESC",
}


def run(args: list[str], root: Path) -> dict:
    """One command in its own process: wall seconds, peak RSS (MiB), exit code, last output line."""
    env = {**os.environ, "FORGEPLAY_DATA": str(root), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    t = time.perf_counter()
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise SystemExit(f"{' '.join(args[3:])} failed ({code}):\n{out[-2000:]}")
    return {"seconds": wall, "rss_mib": usage.ru_maxrss / 1024, "tail": out.strip().splitlines()[-1:] or [""]}


def dataset_for(root: Path, n: int) -> str:
    """A dataset of its own for size n: the world's documents and triples (files copied)."""
    name = f"s{n}"
    if not (root / name).exists():
        shutil.copytree(root / "world", root / name)
    return name


def repeated(args: list[str], root: Path, ds: str, times: int, fresh_index: bool) -> dict:
    """`run` of a command that changes dataset `ds` (and `ds`_valid), `times` times from the same
    state (saved before the first, put back before each other): the median seconds, the
    largest RSS, and every run's seconds. `fresh_index`: the kept indexes are removed before
    each run (the command meets the corpus as new)."""
    names = [d for d in (ds, f"{ds}_valid") if (root / d).exists()]
    saved = Path(tempfile.mkdtemp(prefix="bench-scale-state-"))
    for d in names:
        shutil.copytree(root / d, saved / d)
    runs = []
    try:
        for i in range(times):
            if i:
                for d in (ds, f"{ds}_valid"):
                    shutil.rmtree(root / d, ignore_errors=True)
                for d in names:
                    shutil.copytree(saved / d, root / d)
            if fresh_index:
                shutil.rmtree(root / "_index", ignore_errors=True)
            runs.append(run(CLI + args, root))
    finally:
        shutil.rmtree(saved, ignore_errors=True)
    return {"seconds": statistics.median(r["seconds"] for r in runs), "rss_mib": max(r["rss_mib"] for r in runs),
            "tail": runs[-1]["tail"], "runs": [round(r["seconds"], 1) for r in runs]}


def stages(root: Path, n: int, per_triple: int, out: Path, times: int = 1) -> list[dict]:
    """Every stage at size n; synthesis and validation `times` times each (`repeated`: on the
    same input each time, the median kept), the reads once."""
    ds = dataset_for(root, n)
    # the corpus as new: synthesis builds its BM25 index (and keeps it, so validation reads it)
    shutil.rmtree(root / "_index", ignore_errors=True)
    rows = []
    for stage, args, records in [
        ("synthesize", ["synthesize", "--dataset", ds, "--n", str(n), "--texts", "template",
                        "--per-triple", str(per_triple)], n),
        ("validate", ["validate", "--dataset", ds], n),
        *[(f"sql {q}", ["sql", sql.format(ds=ds)], n) for q, sql in QUERIES.items()],
        ("verify", ["verify", f"{ds}_valid"], n),
        # (tool-use trajectories are exported only with --tool-agent: without it the export writes no row)
        ("export verl", ["export", "verl", "--dataset", f"{ds}_valid", "--out", str(out / f"verl-{n}"),
                         "--tool-agent"], n),
    ]:
        if stage in ("synthesize", "validate"):
            r = repeated(args, root, ds, times, fresh_index=stage == "synthesize")
        else:
            r = run(CLI + args, root)
        rows.append({"stage": stage, "n": n, **r, "per_s": records / r["seconds"]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "tail"}), flush=True)
    return rows


def replay_floor(root: Path, ds: str, limit: int = 10_000) -> dict:
    """Simulator.answers over the calls of `limit` trajectories vs bm25s.retrieve of their queries."""
    import bm25s

    from generators.tools.simulator import SimCall, Simulator
    from storage import load_table

    docs = load_table(ds, "documents", root).to_pylist()
    tools = load_table(ds, "tools", root).to_pylist()
    trajs = load_table(ds, "trajectories", root, columns=["messages", "meta"]).slice(0, limit).to_pylist()
    calls, seed = [], None
    for t in trajs:
        meta = json.loads(t["meta"])
        seed = meta["seed"]
        for m in t["messages"]:
            for c in m["tool_calls"] or []:
                k = meta["calls"][c["id"]]
                calls.append(SimCall(c["name"], json.loads(c["arguments"]), k["golden_doc_ids"], k["mode"], None,
                                     k["supporting"], k["answers"]))
    sim = Simulator(docs, seed=seed, tools=tools)
    queries = [q[0] for q in (sim._prepare(c) for c in calls) if isinstance(q, tuple)]
    ours, floor, scoring = [], [], []
    for _ in range(3):  # alternately, a fresh simulator each time (nothing answered from a warm cache)
        fresh = Simulator(docs, seed=seed, tools=tools)
        t = time.perf_counter()
        fresh.answers(calls)
        ours.append(len(calls) / (time.perf_counter() - t))
        t = time.perf_counter()
        sim.index.retriever.retrieve(bm25s.tokenize(queries, stopwords="en", show_progress=False), k=8,
                                     show_progress=False)
        floor.append(len(queries) / (time.perf_counter() - t))
        t = time.perf_counter()  # the stricter floor: bm25s's scores of each query, no selection of the top k
        for q in queries:
            ids = sim.index.retriever.get_tokens_ids(sim.index.tokenize(q))
            if ids:
                sim.index.retriever.get_scores_from_ids(ids)
        scoring.append(len(queries) / (time.perf_counter() - t))
    return {"calls": len(calls), "searches": len(queries), "ours": ours, "floor": floor, "scoring": scoring}


def rules_share(root: Path, ds: str, limit: int = 10_000) -> dict:
    """The rules layer (replay, grounding, final facts: the defaults) over `limit` trajectories,
    in chunks as validation checks them (the collector paused, as there); the time its grounding step took within it; and
    `ground` alone over the same rows, each record's thinks split by it."""
    import validators.trajectory_rules as rules_layer
    from storage import load_table
    from validators.context import corpus_fingerprint, rule_context
    from validators.grounding import ground
    from validators.records import gc_paused
    from validators.verdict import Reject

    rows = load_table(ds, "trajectories", root).slice(0, limit).to_pylist()
    ctx = rule_context(str(root), ds, corpus_fingerprint(str(root), ds))
    rules_layer.check_trajectories(rows[:10], ctx)  # (builds the index: once per process, not per record)
    step, spent = rules_layer._grounding, [0.0]

    def timed(*args):
        t = time.perf_counter()
        try:
            return step(*args)
        finally:
            spent[0] += time.perf_counter() - t

    rules, within, alone = [], [], []
    rules_layer._grounding = timed
    try:
        for _ in range(3):
            spent[0], t = 0.0, time.perf_counter()
            for i in range(0, len(rows), 2_000):
                with gc_paused():  # (as validation checks a chunk: validators/validator.py)
                    rules_layer.check_trajectories(rows[i:i + 2_000], ctx)
            rules.append(time.perf_counter() - t)
            within.append(spent[0])
            t = time.perf_counter()
            with gc_paused():
                for r in rows:
                    try:
                        ground(r["messages"])
                    except Reject:
                        pass
            alone.append(time.perf_counter() - t)
    finally:
        rules_layer._grounding = step
    return {"rows": len(rows), "rules": rules, "within": within, "alone": alone}


def commit_floor(root: Path, ds: str, n: int = 10_000) -> dict:
    """RunWriter.commit of n trajectory rows vs pyarrow from_pylist + pq.write_table of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage import load_schema, load_table
    from storage.resumable import RunWriter
    from storage.schema import SHARED_COLUMNS

    table = load_table(ds, "trajectories", root).slice(0, n)
    rows = table.drop_columns([c for c in SHARED_COLUMNS if c != "id" and c in table.column_names]).to_pylist()
    schema = load_schema("trajectories").arrow
    ours, floor = [], []
    for i in range(3):
        tmp = Path(tempfile.mkdtemp())
        t = time.perf_counter()
        RunWriter(tmp, f"bench-{i}").commit("b", "trajectories", [dict(r) for r in rows])
        ours.append(len(rows) / (time.perf_counter() - t))
        t = time.perf_counter()
        pq.write_table(pa.Table.from_pylist(table.to_pylist(), schema=schema), tmp / "raw.parquet", compression="zstd")
        floor.append(len(rows) / (time.perf_counter() - t))
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": len(rows), "ours": ours, "floor": floor}


def query_floor(root: Path, ds: str) -> list[dict]:
    """Each catalog query through the catalog's views vs DuckDB over the same files (3 times each)."""
    import duckdb

    from storage import Catalog
    from storage.reader import data_files

    out = []
    files = {f"{ds}_valid_trajectories": data_files(f"{ds}_valid", "trajectories", root),
             f"{ds}_verdicts": data_files(ds, "verdicts", root)}
    for name, sql in QUERIES.items():
        q = sql.format(ds=ds)
        raw = q
        for view, paths in files.items():
            raw = raw.replace(view, f"read_parquet({paths!r}, union_by_name=true)")
        ours, floor = [], []
        for _ in range(3):
            t = time.perf_counter()
            with Catalog(root) as cat:
                cat.rows(q)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            duckdb.connect().sql(raw).fetchall()
            floor.append(time.perf_counter() - t)
        out.append({"query": name, "ours": ours, "floor": floor})
    return out


def start_floor(root: Path) -> list[dict]:
    """Commands that should start at once, against starting Python itself."""
    python = statistics.median(run([sys.executable, "-c", "pass"], root)["seconds"] for _ in range(3))
    out = []
    for name, args in [("sql SELECT 1", ["sql", "SELECT 1"]), ("--help", ["--help"])]:
        secs = [run(CLI + args, root)["seconds"] for _ in range(3)]
        out.append({"command": name, "seconds": statistics.median(secs), "python": python})
    env = {**os.environ, "FORGEPLAY_DATA": str(root)}
    t = time.perf_counter()
    p = subprocess.run(CLI + ["validate", "--dataset", "no_such_dataset"], env=env, capture_output=True, text=True)
    out.append({"command": "validate --dataset <missing> (error)", "seconds": time.perf_counter() - t,
                "python": python, "exit": p.returncode})
    return out


def table(rows: list[dict], sizes: list[int], floors: dict) -> str:
    lo, hi = min(sizes), max(sizes)
    by = {(r["stage"], r["n"]): r for r in rows}
    head = ["stage"] + [f"{n:,}: s / rec/s / RSS MiB" for n in sizes] + [f"cost per record {hi:,} / {lo:,}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for stage in dict.fromkeys(r["stage"] for r in rows):
        cells = [stage]
        for n in sizes:
            r = by.get((stage, n))
            cells.append(f"{r['seconds']:.1f} / {r['per_s']:,.0f} / {r['rss_mib']:,.0f}" if r else "-")
        a, b = by.get((stage, hi)), by.get((stage, lo))
        cells.append(f"{(a['seconds'] / hi) / (b['seconds'] / lo):.2f}" if a and b and hi != lo else "-")
        lines.append("| " + " | ".join(cells) + " |")
    many = [f"{r['stage']} at {r['n']:,}: {', '.join(f'{x:.1f}' for x in r['runs'])} s"
            for r in rows if len(r.get("runs", ())) > 1]
    if many:
        lines += ["", "Runs of the stages repeated (the table gives their median): " + "; ".join(many) + "."]
    if 1_000_000 not in sizes:
        lines += ["", f"10^6 (extrapolated from the per-record cost at {hi:,}; not measured):", ""]
        lines += [f"- {stage}: {by[(stage, hi)]['seconds'] / hi * 1e6 / 60:.0f} min"
                  for stage in ("synthesize", "validate", "verify", "export verl") if (stage, hi) in by]
    lines += ["", "| against its floor | ours | floor | time ours / floor |", "|---|---:|---:|---:|"]
    for name, (ours, floor, unit, is_time) in floors.items():
        cost = ours / floor if is_time else floor / ours  # rates: the time of ours over the floor's
        lines.append(f"| {name} | {ours:,.3f} {unit} | {floor:,.3f} {unit} | {cost:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", type=int, default=50_000, help="documents of the world (>= 50,000 for the issue's setting)")
    ap.add_argument("--sizes", default="10000,100000", help="comma list of trajectory counts")
    ap.add_argument("--root", default=None, help="data root to use (kept); default a temporary folder, removed")
    ap.add_argument("--out", default=None, help="also write the table, command and date to this Markdown file")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of synthesis and validation at each size below --repeat-below, the median kept "
                         "(a 10^4 validation varies by 10%% from run to run here)")
    ap.add_argument("--repeat-below", type=int, default=100_000, help="sizes below this are repeated")
    a = ap.parse_args()
    sizes = sorted(int(x) for x in a.sizes.split(","))
    root = Path(a.root or tempfile.mkdtemp(prefix="bench-scale-"))
    work = Path(tempfile.mkdtemp(prefix="bench-scale-out-"))
    try:
        if not (root / "world").exists():
            world = run(CLI + ["corpus", "world", "--dataset", "world", "--entities", str(a.entities)], root)
            print(json.dumps({"stage": "corpus world", "entities": a.entities, "seconds": world["seconds"]}), flush=True)
        triples = a.entities // 2
        rows = []
        for n in sizes:
            rows += stages(root, n, max(1, -(-n // triples)), work, a.repeat if n < a.repeat_below else 1)
        ds = f"s{max(sizes)}"
        floors: dict = {}
        rp = replay_floor(root, ds)
        ours, floor = statistics.median(rp["ours"]), statistics.median(rp["floor"])
        record("replay (Simulator.answers, batched)", rp["ours"], "bm25s retrieve, one batch", rp["floor"], "calls/s",
               setting=f"{rp['calls']:,} calls of {ds}")
        floors[f"replay, {rp['calls']:,} calls (calls/s)"] = (ours, floor, "/s", False)
        record("replay (Simulator.answers, batched)", rp["ours"], "bm25s scoring alone, no top-k", rp["scoring"],
               "calls/s", setting=f"{rp['calls']:,} calls of {ds}")
        floors["replay against bm25s's scoring alone (calls/s)"] = (ours, statistics.median(rp["scoring"]), "/s", False)
        rs = rules_share(root, ds)
        per = 1000 / rs["rows"]
        floors[f"grounding step within the rules layer, {rs['rows']:,} records (s per 1,000)"] = (
            statistics.median(rs["within"]) * per, statistics.median(rs["rules"]) * per, "s", True)
        floors["grounding alone (`ground`, thinks split by it) against the rules layer (s per 1,000)"] = (
            statistics.median(rs["alone"]) * per, statistics.median(rs["rules"]) * per, "s", True)
        cm = commit_floor(root, ds)
        record("commit (RunWriter)", cm["ours"], "from_pylist + pq.write_table", cm["floor"], "rows/s",
               setting=f"{cm['rows']:,} trajectories")
        floors[f"commit, {cm['rows']:,} rows (rows/s)"] = (statistics.median(cm["ours"]), statistics.median(cm["floor"]), "/s", False)
        for q in query_floor(root, ds):
            record(f"query {q['query']} (catalog views)", q["ours"], "DuckDB on the same files", q["floor"], "s",
                   better="lower", setting=ds)
            floors[f"query {q['query']} (s)"] = (statistics.median(q["ours"]), statistics.median(q["floor"]), "s", True)
        for s in start_floor(root):
            floors[f"start: {s['command']} (s)"] = (s["seconds"], s["python"], "s", True)
        text = table(rows, sizes, floors)
        print(text)
        if a.out:
            cmd = " ".join(["python", "benchmarks/bench_scale.py", *sys.argv[1:]])
            Path(a.out).write_text(f"# Scale benchmark\n\nCommand: `{cmd}`\n\nDate: {datetime.date.today()}, "
                                   f"{os.cpu_count()} cores\n\n{text}\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if a.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
