"""Engine benchmark: how busy a model-bound stage keeps a served engine, against the stand-in
engine (generators/llm/standin_engine.py: N slots, each request holding one for `--latency`
seconds) at 64 and 256 slots. `--stage` picks the command, with `--backend openai` and its
defaults otherwise:

  synthesize     `forgeplay synthesize --texts llm` (n trajectories)
  judge          `forgeplay validate --layers schema,judge` over n template trajectories
  answerability  `forgeplay validate --layers schema,answerability` over the same
  eval           `forgeplay train eval --rollout-backend openai` over n triples of the world (a
                 turn of a rollout is a request; the stand-in's replies end most in one turn)
  acquire        `forgeplay acquire-labels --rollout-backend openai` over n/8 prompts (8 answers
                 each, the default; CARE's signals from the embedded model in the command's process)
  grpo           `forgeplay train grpo --rollout-backend vllm-server --base-url` (the stand-in as
                 the policy server: weights published to it after each step), n/16 steps of the
                 defaults (4 prompts x 4 rollouts); the engine measures the rollouts between weight
                 loads (its phases), the policy updates on this machine's CPU left out, and the
                 bare client sends each phase's requests on their own
  selfplay       `forgeplay selfplay --rollout-backend vllm-server --base-url --no-train`, two
                 iterations of n/8 tasks: iteration 0 poses the world's demonstrations as tasks
                 (`--demo-tasks`), iteration 1 the examiner's (the stand-in answers it with
                 generators/llm/scripted_examiner.py: a search a hop, then a task); each checks
                 its tasks' answerability and makes the student's 5 attempts at each (updates
                 left out, as in grpo). The examiner and the student are two copies of the
                 embedded model (`--examiner`, `--student`: distinct weights, as a training run
                 has them), so each role's turn on the engine starts with a weight load and the
                 engine measures the phases between loads, as for grpo. Use `--floor turns`: a
                 conversation's turns follow one another, and the bare client sending them all
                 at once is a floor no client reaches

For each setting the command runs in a process of its own (as a user runs it) and the
engine measures: its busy share over the command's wall time and over the stage (first
request received to last answer completed), and the stage's requests/s against the floor:
a bare async client sending the same requests (the bodies the engine completed) with
exactly as many in flight as the engine has slots. `--floor turns` makes the bare client send
them as conversations (a body whose messages extend another's is the turn after it): every
first turn at once, each later turn once the one before it is answered, each phase between the
engine's weight loads on its own; the floor for stages whose turns and phases depend on one
another (self-play), which no client can beat. With `--faults`, 5% of requests are
answered 503 and the engine restarts once a third of the way through (1 s down); the bare
client then retries at once. `--code DIR` runs the command from another checkout (e.g. a
worktree of the main branch, for the client before this benchmark's change) with its
defaults; the engine always comes from this one. Writes a markdown table (`--out`).

    python benchmarks/bench_engine.py --n 400 --slots 64,256 --faults
    python benchmarks/bench_engine.py --stage judge --n 300 --slots 64,256
    python benchmarks/bench_engine.py --n 100 --slots 64,256 --code ../main --label before
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from comparisons import record  # noqa: E402

from generators.corpus.build import WorldConfig, write  # noqa: E402
from generators.llm.standin_engine import StandinEngine  # noqa: E402


STAGES = {  # stage -> its command line (before the backend options), given n and a scratch folder
    "synthesize": lambda n, tmp: ["synthesize", "--dataset", "w", "--n", str(n), "--texts", "llm"],
    "judge": lambda n, tmp: ["validate", "--dataset", "w", "--layers", "schema,judge"],
    "answerability": lambda n, tmp: ["validate", "--dataset", "w", "--layers", "schema,answerability"],
    "eval": lambda n, tmp: ["train", "eval", "--dataset", "w", "--limit", str(n), "--no-held-out"],
    "acquire": lambda n, tmp: ["acquire-labels", "--dataset", "w", "--limit", str(max(1, n // 8))],
    "grpo": lambda n, tmp: ["train", "grpo", "--dataset", "w", "--out", str(tmp / "grpo"),
                            "--max-steps", str(max(1, n // 16)), "--checkpoint-every", "0"],
    "selfplay": lambda n, tmp: ["selfplay", "--dataset", "w", "--no-train", "--demo-tasks", "--iterations", "2",
                                "--tasks", str(max(1, n // 8)), "--examiner", roles(tmp, "examiner"),
                                "--student", roles(tmp, "student")],
}
PHASED = ("grpo", "selfplay")  # stages measured between the engine's weight loads


def roles(tmp: Path, role: str) -> str:
    """A copy of the embedded model for `role` under `tmp` (its files hard-linked): a model of
    its own, whose turn on a served engine is a weight load."""
    from generators.llm.model_store import resolve_model

    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:  # another file system
            shutil.copy2(src, dst)

    folder = tmp / "roles" / role
    if not folder.exists():
        shutil.copytree(resolve_model(None), folder, copy_function=link)
    return str(folder)
ENGINE_OPTIONS = {  # how a command is pointed at the engine, where not by --backend openai --base-url --model
    "eval": lambda url: ["--rollout-backend", "openai", "--base-url", url, "--served-model", "standin"],
    "acquire": lambda url: ["--rollout-backend", "openai", "--base-url", url, "--served-model", "standin"],
    "grpo": lambda url: ["--rollout-backend", "vllm-server", "--base-url", url],
    "selfplay": lambda url: ["--rollout-backend", "vllm-server", "--base-url", url],
}


def run_stage(stage: str, code: Path, data_root: Path, url: str, n: int, extra: list[str]) -> float:
    """Run the stage's command from checkout `code`; its wall seconds."""
    engine = ENGINE_OPTIONS.get(stage, lambda u: ["--backend", "openai", "--base-url", u, "--model", "standin"])
    cmd = [sys.executable, "-m", "flows.cli", *STAGES[stage](n, data_root.parent), *engine(url),
           "--data-root", str(data_root), *extra]
    t = time.perf_counter()
    res = subprocess.run(cmd, cwd=code, env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if res.returncode:
        raise SystemExit(f"{stage} failed:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    return wall


def prepare(world: Path, stage: str, n: int) -> None:
    """What the stage reads besides the world: n template trajectories for a validation layer."""
    if stage in ("judge", "answerability"):
        cmd = [sys.executable, "-m", "flows.cli", "synthesize", "--dataset", "w", "--n", str(n), "--texts", "template",
               "--data-root", str(world)]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)


def chains(bodies: list[dict]) -> tuple[list[int], dict[int, list[int]]]:
    """The conversations among `bodies`: a body whose messages extend another's (the turn after
    it: that turn's reply and tool results appended) is that one's child. (roots, children)."""
    key = lambda msgs: json.dumps(msgs, sort_keys=True)  # noqa: E731
    first: dict[str, int] = {}
    for i, b in enumerate(bodies):
        first.setdefault(key(b["messages"]), i)
    roots, children = [], {}
    for i, b in enumerate(bodies):
        msgs = b["messages"]
        parent = next((j for j in (first.get(key(msgs[:n])) for n in range(len(msgs) - 1, 0, -1))
                       if j is not None and j != i), None)
        if parent is None:
            roots.append(i)
        else:
            children.setdefault(parent, []).append(i)
    return roots, children


async def _bare(url: str, bodies: list[dict], inflight: int, turns: bool = False) -> float:
    """Send `bodies` with `inflight` at once, retrying failures at once; seconds taken. With
    `turns`, conversation by conversation (`chains`): every first turn at once, each later turn
    as soon as the one before it is answered."""
    roots, children = chains(bodies) if turns else (range(len(bodies)), {})
    sem = asyncio.Semaphore(inflight)

    async def one(session, i):
        async with sem:
            while True:
                try:
                    async with session.post(url + "/chat/completions", json=bodies[i]) as r:
                        await r.read()
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
        await asyncio.gather(*(one(session, c) for c in children.get(i, ())))

    t = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(one(session, r) for r in roots))
    return time.perf_counter() - t


def engine_for(slots: int, latency: float, faults: bool, expected: int) -> StandinEngine:
    kw = {"fail_503": 0.05, "restart_at": max(1, expected // 3), "down": 1.0} if faults else {}
    return StandinEngine(slots=slots, latency=latency, keep_bodies=True, **kw)


def measure(world: Path, code: Path, stage: str, slots: int, latency: float, faults: bool, n: int,
            extra: list[str], floor: str = "all") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        subprocess.run(["cp", "-r", str(world), str(root)], check=True)
        with engine_for(slots, latency, faults, expected=6 * n) as engine:
            start = engine.mark()
            wall = run_stage(stage, code, root, engine.url, n, extra)
            command_share = engine.busy_share(start)
            stage_s = engine.last_at - engine.first_at
            bodies, stats, stage_share = list(engine.bodies), engine.stats(), engine.stage_share()
            phases = list(engine.body_phases) if stage in PHASED or floor == "turns" else [0] * len(bodies)
            if stage in PHASED:
                stage_s, stage_share = engine.phase_share()
    bare_s = 0.0
    for phase in sorted(set(phases)):  # each phase's requests on their own (one phase unless phased)
        mine = [b for b, p in zip(bodies, phases) if p == phase]
        with engine_for(slots, latency, faults, expected=len(mine)) as engine:
            bare_s += asyncio.run(_bare(engine.url, mine, slots, turns=floor == "turns"))
    return {"slots": slots, "faults": faults, "requests": len(bodies), "wall": wall, "stage_s": stage_s,
            "busy_command": command_share, "busy_stage": stage_share,
            "rps": len(bodies) / stage_s, "bare_rps": len(bodies) / bare_s, **stats}


def table(rows: list[dict], label: str) -> list[str]:
    out = ["| stage, client | slots | faults | requests | command wall | busy over command | busy over stage | "
           "stage req/s | bare client req/s | ratio | 503s | dropped by restart | paid twice |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {label} | {r['slots']} | {'5% 503 + restart' if r['faults'] else 'none'} | {r['requests']} | "
                   f"{r['wall']:.1f} s | {100 * r['busy_command']:.0f}% | {100 * r['busy_stage']:.0f}% | "
                   f"{r['rps']:.1f} | {r['bare_rps']:.1f} | {r['rps'] / r['bare_rps']:.2f}x | "
                   f"{r['answered_503']} | {r['dropped']} | {r['twice_completed']} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stage", default="synthesize", choices=sorted(STAGES), help="the command measured (module docstring)")
    p.add_argument("--n", type=int, default=400, help="trajectories per command (made, or checked)")
    p.add_argument("--entities", type=int, default=500, help="world size")
    p.add_argument("--slots", default="64,256", help="engine slots, comma-separated")
    p.add_argument("--latency", type=float, default=1.0, help="seconds a request holds a slot")
    p.add_argument("--faults", action="store_true", help="also run each setting with 5%% 503s and a restart")
    p.add_argument("--code", type=Path, default=ROOT, help="checkout whose command runs")
    p.add_argument("--label", default="this checkout", help="the client's name in the table")
    p.add_argument("--extra", default="", help="more options of the command, e.g. '--chunk 64'")
    p.add_argument("--floor", default="all", choices=["all", "turns"],
                   help="the bare client: all = every request at once (up to the slots); turns = each "
                        "conversation's turns in order and each phase (between weight loads) on its own")
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "results" / "bench_engine.md")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        world = Path(tmp) / "world"
        write(WorldConfig(seed=3, entities=a.entities), world, "w")
        prepare(world, a.stage, a.n)
        label = f"{a.stage}, {a.label}"
        rows = []
        for slots in [int(s) for s in a.slots.split(",")]:
            for faults in ([False, True] if a.faults else [False]):
                r = measure(world, a.code.resolve(), a.stage, slots, a.latency, faults, a.n, a.extra.split(), a.floor)
                rows.append(r)
                print(table(rows[-1:], label)[-1], flush=True)
                setting = f"{slots} slots, {a.latency:g} s a request, {'5% 503 + restart' if faults else 'no faults'}"
                record(f"{a.stage} ({a.label})", r["rps"], "bare async client, same requests", r["bare_rps"],
                       "requests/s", setting=setting)
    lines = table(rows, label)
    print("\n".join(lines))
    commit = subprocess.run(["git", "-C", str(a.code), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    argv = [(f"<checkout at {commit}>" if commit else "<another checkout>") if arg == str(a.code) else arg
            for arg in sys.argv[1:]]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    head = "" if a.out.exists() else "# bench_engine: model-bound stages against the stand-in engine\n"
    with open(a.out, "a") as f:
        f.write(f"{head}\n## {label}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
                f"`python benchmarks/bench_engine.py {shlex.join(argv)}` (n={a.n}, {a.entities} entities, "
                f"latency {a.latency:g} s per request)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
