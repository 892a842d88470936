"""The benchmarks' shared record form (benchmarks/comparisons.py) and the collector's rendering
of RESULTS.md (benchmarks/results.py), on hand-made records: no benchmark runs here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCH_DIR / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


comparisons, results = _load("comparisons"), _load("results")
INFO = {"cores": 2, "cpu": "Test CPU", "ram_gb": 8.0, "versions": {"python": "3.11", "torch": "2.13"},
        "commit": "abc1234"}


def test_record_appends_medians_and_ratio(tmp_path, monkeypatch):
    out = tmp_path / "r.jsonl"
    monkeypatch.setenv(comparisons.ENV, str(out))
    comparisons.record("ours", [2.0, 9.0, 4.0], "peer", [1.0, 3.0, 4.0], "tokens/s", setting="s1", benchmark="b")
    comparisons.record("ours", [2.0, 9.0, 4.0], "peer", [1.0, 3.0, 4.0], "s", better="lower", paired=True,
                       benchmark="b")
    plain, paired = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert (plain["ours_median"], plain["baseline_median"], plain["samples"]) == (4.0, 3.0, [3, 3])
    assert plain["ratio"] == pytest.approx(4.0 / 3.0)  # ratio of the medians
    assert paired["ratio"] == pytest.approx(2.0)  # median of 2/1, 9/3, 4/4
    assert paired["better"] == "lower" and paired["paired"]


def test_record_without_the_variable_writes_nothing_and_bad_input_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(comparisons.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert comparisons.record("a", 2, "b", 4, "s")["ratio"] == 0.5
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="equal counts"):
        comparisons.record("a", [1, 2], "b", [1], "s", paired=True)
    with pytest.raises(ValueError, match="better"):
        comparisons.record("a", 1, "b", 1, "s", better="faster")


def test_render_one_table_with_skipped_and_failed_benchmarks():
    recs = [comparisons.comparison("commit write", [1.2, 1.3], "raw write", [1.0, 1.0], "s", better="lower",
                                   paired=True, setting="1,000 rows", benchmark="bench_storage"),
            comparisons.comparison("index", 30839.4, "every template", 2188.0, "sentences/s", benchmark="bench_world"),
            comparisons.comparison("prefix", 9.75, "plain", 35.9, "s", better="lower", benchmark="bench_train")]
    runs = [{"benchmark": "storage", "status": "ok", "seconds": 20.0},
            {"benchmark": "world", "status": "ok", "seconds": 50.0},
            {"benchmark": "vllm", "status": "skipped: no .venv-vllm (make vllm-env)", "seconds": 0.0},
            {"benchmark": "train", "status": "failed: exit code 1 (its output is in the log above)", "seconds": 3.0},
            {"benchmark": "cores", "status": "ok", "seconds": 5.0}]
    recs[1]["setting"] = "a|b"  # a cell's pipe is escaped, not a column break
    md = results.render(recs, runs, INFO, "2026-01-02 03:04 UTC")
    assert "2026-01-02 03:04 UTC, at commit abc1234, in 1 min." in md
    assert "2 cores, Test CPU, 8.0 GB RAM; python 3.11, torch 2.13" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| benchmark")]
    assert rows == [
        "| storage | 1,000 rows | commit write vs raw write | 1.25 | 1.00 | s | 2/2 | 1.25† | lower |",
        "| world | a\\|b | index vs every template | 30,839 | 2,188 | sentences/s | 1/1 | 14.1 | higher |",
        "| vllm |  | skipped: no .venv-vllm (make vllm-env) |  |  |  |  |  |  |",
        "| train |  | prefix vs plain | 9.75 | 35.9 | s | 1/1 | 0.272 | lower |",
        "| train |  | failed: exit code 1 (its output is in the log above) |  |  |  |  |  |  |",
        "| cores |  | ran, but recorded no comparison |  |  |  |  |  |  |"]
    assert "storage 20 s, world 50 s" in md


def test_cli_renders_a_jsonl_file_and_refuses_a_missing_one(tmp_path, capsys):
    src, out = tmp_path / "r.jsonl", tmp_path / "RESULTS.md"
    rec = comparisons.comparison("a", 3.0, "b", 2.0, "rows/s", benchmark="bench_x")
    src.write_text(json.dumps(rec) + "\n")
    assert results.main(["--render", str(src), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| x |  | a vs b | 3.00 | 2.00 | rows/s | 1/1 | 1.50 | higher |" in text
    assert "Run time" not in text  # nothing ran
    with pytest.raises(SystemExit) as err:
        results.main(["--render", str(tmp_path / "missing.jsonl")])
    assert err.value.code == 2 and "missing.jsonl: no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        results.main(["--only", "nosuch"])
    assert "unknown benchmark(s) nosuch" in capsys.readouterr().err


def _bench_engine():
    sys.path.insert(0, str(BENCH_DIR))  # (its own imports: comparisons)
    return _load("bench_engine")


def test_the_engine_benchmarks_turns_floor_sends_a_turn_after_the_one_before_it():
    """bench_engine --floor turns: a body whose messages extend another's is the turn after it,
    and the bare client sends it only once that one is answered (a real stand-in engine)."""
    import asyncio

    from generators.llm.standin_engine import StandinEngine

    bench = _bench_engine()
    sys_msg, ask = {"role": "system", "content": "tools"}, {"role": "user", "content": "q1"}
    turn2 = [sys_msg, ask, {"role": "assistant", "content": "<tool_call>x</tool_call>"},
             {"role": "user", "content": "<tool_response>r</tool_response>"}]
    turn3 = turn2 + [{"role": "assistant", "content": "<tool_call>y</tool_call>"}, {"role": "user", "content": "r2"}]
    other = [sys_msg, {"role": "user", "content": "q2"}]
    bodies = [{"model": "standin", "messages": m, "seed": i} for i, m in enumerate([turn3, other, turn2, [sys_msg, ask]])]
    roots, children = bench.chains(bodies)
    assert sorted(roots) == [1, 3] and children == {3: [2], 2: [0]}
    with StandinEngine(slots=8, latency=0.05, keep_bodies=True) as engine:
        asyncio.run(bench._bare(engine.url, bodies, 8, turns=True))
        done = [b["seed"] for b in engine.bodies]
    assert sorted(done) == [0, 1, 2, 3] and done.index(3) < done.index(2) < done.index(0)
