"""A trained self-play iteration SIGKILLed inside the student's update, after its first
checkpoint, and resumed with --resume ends with the weights of the uninterrupted run: the
examiner's, the student's and the EMA teacher's (the teacher's moving average rides in each
checkpoint; restarted from the stage's starting weights it would differ). Real world corpus,
simulator, Trainer and flow; a tiny random Llama in both roles, iteration 0's examine phase
replayed from demonstrations as in tests/selfplay/test_update.py."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from generators.corpus.build import WorldConfig, write
from generators.tools.base import base_rows
from generators.tools.simulator import Simulator
from selfplay.phases import replay_conversations, replay_examine
from selfplay.play import PlayConfig, run_id
from selfplay.warmstart import EXAMINER_TOOL, demonstrations
from storage import load_table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


def setup(root: Path, model: str) -> PlayConfig:
    """A world in `root` and iteration 0's examine phase replayed; the run's config."""
    write(WorldConfig(seed=3, entities=200), root, "w")
    docs, triples = load_table("w", "documents", root).to_pylist(), load_table("w", "triples", root).to_pylist()
    tools = base_rows()
    demos = demonstrations(docs, triples, Simulator(docs, seed=0, tools=tools),
                           next(t for t in tools if t["name"] == EXAMINER_TOOL), n=3)[0]
    cfg = PlayConfig(dataset="w", examiner=model, student=model, tasks=len(demos), attempts=2, student_turns=2,
                     max_new_tokens=12, batch_size=8, checkpoints=str(root / "ck"), warmstart=False,
                     examiner_steps=2, student_steps=3, update_batch=2, lr=1e-3, tau=0.3, checkpoint_every=1)
    replay_examine(root, cfg, run_id(cfg, root), 0, replay_conversations(demos, docs), docs)
    return cfg


def weights(path) -> dict:
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


KILL = """
import selfplay.update as u
real = u.follow
def dying(trainer, teacher, tok, out):  # SIGKILL at step 2 of the student's update, after step 1's checkpoint
    real(trainer, teacher, tok, out)
    inner = trainer.on_step
    def on_step(rec):
        inner(rec)
        if trainer.step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    trainer.on_step = on_step
u.follow = dying
"""


def launch(tmp_path: Path, cfg: PlayConfig, root: Path, kill: bool = False) -> tuple[subprocess.Popen, Path]:
    """`selfplay` (with --resume) started in a process of its own with one torch thread (the
    same float sums in every run; a thread count that follows the machine's load would change
    them): the process and its log, whose last line is the summary's models and skipped phases."""
    script = f"""
import json, os, signal, sys
sys.path.insert(0, {str(REPO)!r})
{KILL if kill else ""}
from dataclasses import replace
from flows.selfplay import run_selfplay
from selfplay.play import PlayConfig
cfg = PlayConfig(**json.loads({json_cfg(cfg, root)!r}))
s = run_selfplay(replace(cfg, resume=True), {str(root)!r}, progress=False)
print(json.dumps({{"models": s["models"], "skipped": s["skipped_phases"]}}))
"""
    log = tmp_path / f"{root.name}-{int(kill)}.log"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "FORGEPLAY_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    with open(log, "w") as out:  # its own process group: a temporary Prefect server dies with it
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    return proc, log


def finish(proc: subprocess.Popen, log: Path) -> tuple[int, str]:
    """(exit code, output) of a started run; its process group is killed either way."""
    try:
        code = proc.wait(timeout=900)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return code, log.read_text()


def test_killed_in_the_student_update_and_resumed_equals_the_uninterrupted_run(tmp_path, tiny_llama_dir):  # noqa: F811
    import json

    clean, killed = tmp_path / "clean", tmp_path / "killed"
    cfg = setup(clean, str(tiny_llama_dir))
    setup(killed, str(tiny_llama_dir))
    runs = [launch(tmp_path, cfg, clean), launch(tmp_path, cfg, killed, kill=True)]  # one torch thread each, at once
    try:
        (code, out), (killed_code, killed_out) = [finish(*r) for r in runs]
    finally:  # the second run too, when the first's wait fails
        for proc, _ in runs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, out[-2000:]
    want = json.loads(out.strip().splitlines()[-1])["models"]
    assert killed_code == -9, killed_out[-2000:]
    student_dir = killed / "ck" / "it0" / "student"
    assert (student_dir / "checkpoints" / "step-00000001" / "extra-teacher.pt").exists()
    assert not (student_dir / "final").exists()  # killed inside the update

    code, out = finish(*launch(tmp_path, cfg, killed))
    assert code == 0, out[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["skipped"] == 3  # examine, attempt, examiner-update: the student's update resumed
    got = summary["models"]
    for role in ("examiner", "student", "teacher"):
        a, b = weights(want[role]), weights(got[role])
        assert a.keys() == b.keys()
        assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a), f"the {role} differs after the resume"
    start = weights(tiny_llama_dir)
    teacher, student = weights(got["teacher"]), weights(got["student"])
    assert any(not torch.equal(start[k], teacher[k]) for k in start)  # the teacher moved ...
    assert any(not torch.allclose(student[k], teacher[k]) for k in start)  # ... and is not the student


def json_cfg(cfg: PlayConfig, root: Path) -> str:
    import json
    from dataclasses import asdict

    return json.dumps({**asdict(cfg), "checkpoints": str(root / "ck")})
