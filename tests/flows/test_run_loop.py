"""The whole loop, `forgeplay run`, as a user runs it (the CLI in a subprocess) at a tiny size
on a tiny random-weight model: every stage runs and is recorded, every kind of shard is
written, each funnel adds up, every row's lineage points to rows that exist, and the report
and dataset cards are written. Then the reliability check: the same config run again, killed
with SIGKILL inside synthesis, inside a validation commit (tests/flows/kill_in_commit.py),
inside a training step and during label acquisition, each time continued with `--resume`,
ends with the datasets of the uninterrupted run (the same ids, none twice; model-sampled rows
are seeded per sample, and the killed run lives in another data root, so this also checks
that no id depends on where the data lives), no label paid twice, and no process of the run
left behind after any kill (its temporary Prefect server included); a shard corrupted
afterwards is quarantined at the next start, left out of what stages read, and reported."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.cli_run import queries

from storage import Catalog, load_table
from storage.loop_runs import read, run_ids
from storage.manifest import datasets
from storage.reader import entries

REPO = Path(__file__).resolve().parents[2]
ID = {"documents": "doc_id", "triples": "triple_id", "tools": "tool_id", "trajectories": "traj_id",
      "tasks": "task_id", "rollouts": "rollout_id"}


def config(model: Path) -> dict:
    return {"dataset": "w", "model": str(model),
            "backend": {"model": str(model)},  # the judge: a random model, so each record it reads is a reject
            "corpus": {"entities": 200},
            "synthesize": {"n": 16, "chunk": 4},
            "validate": {"judge_sample": 4, "judge_max_tokens": 8},
            "eval": {"limit": 4, "max_new_tokens": 24, "max_turns": 2},
            "sft": {"max_steps": 3, "batch_size": 2, "checkpoint_every": 1, "train_layers": 0},
            "selfplay": {"tasks": 4, "attempts": 2, "max_new_tokens": 24, "examiner_turns": 2, "student_turns": 2,
                         "examiner_steps": 1, "student_steps": 1, "update_batch": 2, "train_layers": 0},
            "acquire": {"limit": 8, "batch": 2, "n": 2, "budget": 3, "max_new_tokens": 24, "max_turns": 2},
            "grpo": {"max_steps": 2, "limit": 8, "group_size": 2, "batch_size": 2, "budget": 4,
                     "max_new_tokens": 24, "max_turns": 2, "label_p": 0.5}}


def config_of(path) -> dict:
    return yaml.safe_load(Path(path).read_text())


def start(root: Path, mark: str, *args: str, cli: tuple[str, ...] = ("flows.cli",)) -> subprocess.Popen:
    # one torch thread in every process of every run: with self-play training on, a thread count
    # that follows the machine's load (generators/llm/cores.py) changed float sums between runs
    env = {**os.environ, "FORGEPLAY_DATA": str(root), "PYTHONPATH": str(REPO), "FORGEPLAY_TEST_MARK": mark,
           "FORGEPLAY_THREADS": "1"}
    env.pop("PREFECT_API_URL", None)
    return subprocess.Popen([sys.executable, "-m", *cli, "run", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(p: subprocess.Popen, timeout: float = 900) -> str:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out[-3000:]
    return out


def processes_with(mark: str) -> list[str]:
    """Command lines of the live processes whose environment carries `mark`."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if f"FORGEPLAY_TEST_MARK={mark}".encode() in (d / "environ").read_bytes():
                    found.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200])
            except OSError:
                continue
    return found


def state(root: Path) -> dict:
    ids = run_ids(root)
    return read(root, ids[0]) if ids else {"stages": {}, "run_id": None}


def rows(root: Path) -> dict[tuple[str, str], list]:
    """(dataset, kind) -> the sorted ids of its committed rows (verdicts and labels by content)."""
    out = {}
    for ds in datasets(root):
        for kind in {e.kind for e in entries(root, ds)}:
            table = load_table(ds, kind, root).to_pylist()
            if kind in ID:
                out[(ds, kind)] = sorted(r[ID[kind]] for r in table)
            elif kind == "verdicts":
                out[(ds, kind)] = sorted((r["record_id"], r["layer"], r["check"], r["passed"]) for r in table)
            else:
                out[(ds, kind)] = sorted((r["prompt_id"], r["strategy"]) for r in table)
    return out


def look(root: Path) -> dict[str, tuple[int, tuple[str, ...]]]:
    """What a DuckDB reader sees now: view -> (its row count, the shard files it reads)."""
    cat = Catalog(root)
    try:
        return {v: (cat.scalar(f'SELECT count(*) FROM "{v}"'), tuple(files)) for v, files in cat.views.items()
                if not v.endswith("_funnel")}
    finally:
        cat.close()


class CleanRun:
    """The uninterrupted run, started at once and read by a DuckDB reader twice a second (in a
    thread) while it runs, so the killed runs of the reliability test go beside it."""

    def __init__(self, base: Path, cfg: Path):
        self.root, self.cfg, self.seen, self.error = base / "clean", cfg, [], None
        self.proc = start(self.root, uuid.uuid4().hex, "--config", str(cfg))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            while self.proc.poll() is None:
                self.seen.append(look(self.root))  # an error reading a shard fails every test
                time.sleep(0.5)
        except BaseException as e:  # noqa: BLE001 (raised again in result())
            self.error = e

    def result(self) -> tuple:
        """(data root, config file, its record, CLI output, what the reader saw each time)."""
        if not hasattr(self, "_result"):
            out = finish(self.proc)
            self.reader.join()
            if self.error is not None:
                raise self.error
            self._result = (self.root, self.cfg, state(self.root), out, self.seen)
        return self._result


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, tiny_llama_dir):
    base = tmp_path_factory.mktemp("loop")
    cfg = base / "loop.yaml"
    cfg.write_text(yaml.safe_dump(config(tiny_llama_dir)))
    run = CleanRun(base, cfg)
    yield run
    if run.proc.poll() is None:
        run.proc.kill()
        run.proc.wait()


@pytest.fixture(scope="module")
def clean(clean_run):
    """The uninterrupted run once it has finished (CleanRun.result)."""
    return clean_run.result()


def test_killed_at_four_points_and_resumed_equals_the_uninterrupted_run(clean_run, tmp_path):
    """The first test of the module: its killed runs go while the uninterrupted one runs."""
    root, mark = tmp_path / "killed", uuid.uuid4().hex
    args = ["--config", str(clean_run.cfg)]
    _kill_when(root, mark, args, lambda r: 0 < _shards(r, "w", "trajectories") < 4, "inside synthesis")
    run_id = state(root)["run_id"]
    resume = ["--resume", run_id]
    p = start(root, mark, *resume, cli=("tests.flows.kill_in_commit", "verdicts"))
    out = p.communicate(timeout=600)[0]
    assert p.returncode == -signal.SIGKILL, out[-2000:]
    _nothing_left(root, mark, "inside a commit")
    on_disk = {str(f.relative_to(root / "w")) for f in (root / "w").rglob("part-*.parquet")}
    assert not _shards(root, "w", "verdicts") and on_disk - {e.path for e in entries(root, "w")}, \
        "the kill came before the verdicts shard was renamed into place"
    _kill_when(root, mark, resume, _in_training, "inside a training step")
    _kill_when(root, mark, resume, lambda r: "acquire" not in state(r)["stages"] and _shards(r, "w_labels", "rollouts") > 0,
               "during label acquisition")
    finish(start(root, mark, *resume))
    assert not processes_with(mark)
    done = state(root)
    assert done["status"] == "done"
    clean_root, _, rec, _, _ = clean_run.result()
    assert run_id == rec["run_id"]
    got, want = rows(root), rows(clean_root)
    assert set(got) == set(want)
    for key, ids in got.items():
        assert len(ids) == len(set(ids)), f"duplicates in {key}"
    for key in want:  # what the program makes and what the models sample, the same row for row
        assert got[key] == want[key], key
    ledger = done["stages"]["acquire"]["summary"]["ledger"]
    labels = load_table("w_labels", "labels", root).to_pylist()
    paid = [r["prompt_id"] for r in labels if r["source"] != "pseudo"]
    assert len(paid) == len(set(paid))  # no label paid twice
    assert ledger["spent"] == ledger["labels"] <= 3

    # a shard corrupted after the run: the next start quarantines it, no reader sees it, and it is reported
    entry = entries(root, "w", "trajectories")[0]
    path = root / "w" / entry.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    out = finish(start(root, mark, *resume))
    found = state(root)["shards"]
    assert [(q["path"], q["problem"]) for q in found["quarantined"]] == [(str(path), "checksum_mismatch")]
    assert found["checked"] == sum(len(entries(root, ds)) for ds in set(done["datasets"].values())) + 1
    assert "quarantined shards" in out
    assert load_table("w", "trajectories", root).num_rows == len(want[("w", "trajectories")]) - entry.rows
    report = Path(state(root)["report"]).read_text()
    assert 'id="table-quarantined"' in report and entry.path in report


def test_every_stage_runs_and_is_recorded(clean):
    root, _, rec, out, _ = clean
    assert rec["status"] == "done"
    assert {s for s, v in rec["stages"].items() if v["status"] == "done"} == {
        "corpus", "synthesize", "validate", "eval-base", "sft", "eval-sft", "selfplay", "acquire", "grpo", "eval-grpo"}
    assert set(rec["eval"]) == {"base", "sft", "grpo"}
    for model in ("sft", "selfplay", "grpo"):
        assert (Path(rec["models"][model]) / "config.json").exists(), model
    assert f"run {rec['run_id']}" in out and "held-out exact match" in out and "forgeplay sql" in out
    for q in queries(rec["datasets"]):  # the queries it suggests run on what it made
        sql = shlex.split(q)[2]
        res = CliRunner().invoke(app, ["sql", sql, "--data-root", str(root)])
        assert res.exit_code == 0 and "count" in res.output, (sql, res.output)
    assert Path(rec["report"]).stat().st_size > 10_000
    # the SFT model was trained on turns longer than the evaluation's 24 new tokens: its stage says so
    warned = {k for k, v in rec["stages"].items() if "warning: " in (v.get("notes") or "")}
    assert "eval-sft" in warned and "eval-base" not in warned, warned
    warning = rec["stages"]["eval-sft"]["summary"]["warnings"][0]
    assert "more than --max-new-tokens 24" in warning and warning in Path(rec["report"]).read_text()
    assert f"warning (eval-sft): {warning}" in out, out[-3000:]
    for ds, card in rec["cards"].items():
        assert Path(card).read_text().startswith("---\n"), ds


def test_selfplay_trains_the_examiner_and_the_student_with_its_teacher_and_the_judge_reads_a_sample(clean):
    """The loop's defaults switch on what π-Play is: the examiner's update (iteration 0's on its
    replayed demonstrations, by likelihood), the student's with a non-zero distillation term, a
    teacher that moved, the answerability filter; and the judge layer on a sample."""
    import json

    import torch
    from transformers import AutoModelForCausalLM

    root, _, rec, _, _ = clean
    its = rec["stages"]["selfplay"]["summary"]["iterations"]
    assert len(its) == 2 and its[0]["replayed"] and "replayed" not in its[1]
    it0 = its[0]
    assert it0["examiner_steps"] == 1 and it0["examiner_demo_nll"] > 0 and it0["examiner_model"].endswith("it0/examiner/final")
    assert it0["student_steps"] == 1 and it0["teacher_kl"] > 0
    weights = lambda p: AutoModelForCausalLM.from_pretrained(p).state_dict()  # noqa: E731
    start, teacher = weights(rec["models"]["sft"]), weights(it0["teacher_model"])
    assert any(not torch.equal(start[k], teacher[k]) for k in start), "the teacher did not move"
    config = json.loads((Path(rec["train_runs"]["selfplay"]) / "it0" / "student" / "config.json").read_text())
    assert config["selfplay-student"]["distill_coef"] > 0 and config["selfplay-student"]["teacher"] is None
    from flows.loop_stages import sections  # the test's config leaves these switches to the loop's defaults

    assert not {"train", "answerability", "demo_tasks", "warmstart"} & set(config_of(clean[1])["selfplay"])
    assert {k: sections()["selfplay"].defaults[k] for k in ("train", "answerability", "demo_tasks")} == \
        {"train": True, "answerability": True, "demo_tasks": True}
    judged = [f for f in rec["stages"]["validate"]["summary"]["funnel"] if f["layer"] == "judge"]
    assert sum(f["rejected"] for f in judged) == 4  # the 4 records of the sample, each unreadable


def test_every_kind_is_written_and_every_funnel_adds_up(clean):
    root, _, rec, _, _ = clean
    got = rows(root)
    w, sp, labels = rec["datasets"]["world"], rec["datasets"]["selfplay"], rec["datasets"]["labels"]
    for key in [(w, "documents"), (w, "triples"), (w, "tools"), (w, "trajectories"), (w, "verdicts"),
                (rec["datasets"]["accepted"], "trajectories"), (sp, "verdicts"), (sp, "rollouts"), (sp, "tasks"),
                (labels, "rollouts"), (labels, "labels")]:
        assert got.get(key), f"no rows of {key}"
    for key, ids in got.items():
        assert len(ids) == len(set(ids)), f"duplicates in {key}"
    v = rec["stages"]["validate"]["summary"]
    failed = {r[0] for r in got[(w, "verdicts")] if not r[3]}
    assert v["rows_in"] == v["rows_out"] + len(failed) == 16
    assert sum(f["rejected"] for f in v["funnel"] if f["reason"]) == len(failed)
    assert len(got[(rec["datasets"]["accepted"], "trajectories")]) == v["rows_out"]
    for it in rec["stages"]["selfplay"]["summary"]["iterations"]:
        assert it["examiner_outputs"] == it["tasks"] + sum(it["rejects"].values())
    ledger = rec["stages"]["acquire"]["summary"]["ledger"]
    assert ledger["spent"] <= 3


def test_every_rows_lineage_points_to_rows_that_exist(clean):
    root, _, rec, _, _ = clean
    known = set()
    tables = {}
    for ds in datasets(root):
        for kind in {e.kind for e in entries(root, ds)}:
            tables[(ds, kind)] = t = load_table(ds, kind, root).to_pylist()
            known |= {r["id"] for r in t} | ({r[ID[kind]] for r in t} if kind in ID else set())
    assert known
    for (ds, kind), t in tables.items():
        for r in t:
            missing = set((r.get("lineage") or {}).get("parent_ids") or []) - known
            assert not missing, f"{ds}/{kind} row points to {sorted(missing)[:3]}"
            if kind == "verdicts":
                assert r["record_id"] in known, (ds, r)
            if kind in ("labels", "rollouts"):
                assert r["prompt_id"] in known, (ds, kind, r["prompt_id"])


def test_duckdb_readers_during_the_run_see_only_whole_committed_shards(clean):
    root, _, _, _, seen = clean
    committed = {}  # shard file -> its rows, as the manifests hold them at the end
    for ds in datasets(root):
        committed |= {str(e.abspath(root / ds)): e.rows for e in entries(root, ds)}
    assert len({sum(n for n, _ in view.values()) for view in seen}) >= 5, "the reader never overlapped the run"
    last: dict[str, set] = {}
    for view in seen:
        for name, (n, files) in view.items():
            assert set(files) <= set(committed), f"{name} read a shard that was never committed"
            assert n == sum(committed[f] for f in files), f"{name} saw part of a shard"
            assert last.get(name, set()) <= set(files), f"{name} lost a shard"
            last[name] = set(files)


def _kill_when(root: Path, mark: str, cfg_args: list[str], ready, what: str) -> None:
    p = start(root, mark, *cfg_args)
    deadline = time.monotonic() + 600
    while not ready(root):
        assert p.poll() is None, f"the run ended before {what}: {p.communicate()[0][-2000:]}"
        assert time.monotonic() < deadline, f"never reached {what}"
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)  # the flow process only, as the kernel's OOM killer would
    p.wait(timeout=30)
    _nothing_left(root, mark, what)


def _nothing_left(root: Path, mark: str, what: str) -> None:
    deadline = time.monotonic() + 30
    while (left := processes_with(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"left behind after a kill {what}: {left}"
    assert state(root)["status"] != "done"


def _shards(root: Path, ds: str, kind: str) -> int:
    try:
        return len(entries(root, ds, kind))
    except FileNotFoundError:
        return 0


def _in_training(root: Path) -> bool:
    st = state(root)
    return "sft" not in st["stages"] and any((root / "runs").glob("*/sft/checkpoints/*/*"))
