"""storage/lifeline.py: a tied child and the files named for it do not outlive a process the
kernel kills (SIGKILL: no `finally` runs), and nothing is deleted while the process lives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    from storage import lifeline
    folder, work = sys.argv[1], sys.argv[2]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    lifeline.tie(child.pid, group=True, grace=2, remove=[folder, os.path.join(work, "weights-*.safetensors")])
    print(child.pid, flush=True)
    time.sleep(3)  # the watcher is running
    if sys.argv[3] == "kill":
        os.kill(os.getpid(), 9)
    child.kill()  # the child ends first: the watcher ends too, deleting nothing
    child.wait()
    time.sleep(3)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _run(tmp_path: Path, how: str):
    folder, work = tmp_path / "temporary", tmp_path / "out"
    for d in (folder, work):
        d.mkdir()
    (folder / "weights-1.safetensors").write_bytes(b"x" * 1000)
    (work / "weights-2.safetensors").write_bytes(b"x" * 1000)
    (work / "server.log").write_text("kept")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(folder), str(work), how], capture_output=True, text=True,
                       env=env, timeout=60)
    return p, int(p.stdout.split()[0]), folder, work


def test_a_killed_process_takes_its_child_and_its_files_with_it(tmp_path):
    p, child, folder, work = _run(tmp_path, "kill")
    assert p.returncode == -signal.SIGKILL, p.stderr
    deadline = time.monotonic() + 30
    while (_alive(child) or folder.exists() or (work / "weights-2.safetensors").exists()) \
            and time.monotonic() < deadline:  # the watcher removes them one after the other
        time.sleep(0.2)
    assert not _alive(child)
    assert not folder.exists() and not (work / "weights-2.safetensors").exists()
    assert (work / "server.log").read_text() == "kept"  # only what matches is deleted


def test_nothing_is_deleted_when_the_child_ends_first(tmp_path):
    p, child, folder, work = _run(tmp_path, "child-ends")
    assert p.returncode == 0, p.stderr
    time.sleep(2)
    assert (folder / "weights-1.safetensors").exists() and (work / "weights-2.safetensors").exists()


def test_files_alone_are_deleted_after_a_kill(tmp_path):
    """`leave_nothing`: a client of a server it did not start has only files to clean up."""
    folder = tmp_path / "client"
    folder.mkdir()
    (folder / "weights-1.safetensors").write_bytes(b"x" * 1000)
    script = ("import os, sys, time\nfrom storage import lifeline\nlifeline.leave_nothing([sys.argv[1]])\n"
              "time.sleep(3)\nos.kill(os.getpid(), 9)\n")
    p = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert p.returncode == -signal.SIGKILL, p.stderr
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not folder.exists()
