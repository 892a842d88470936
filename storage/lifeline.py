"""Child processes that must not outlive the process that started them, however it ends:
normal exit, an exception, or SIGKILL from the kernel (where no `finally` or `atexit` runs).
`tie(pid)` starts a small watcher process, in its own session (Ctrl-C and group signals do not
reach it), that waits for this process to end and then sends SIGTERM to `pid` (to its whole
process group with `group=True`), then SIGKILL after `grace` seconds; then it deletes the
files and folders matching `remove` (glob patterns: a vLLM server's temporary folder and the
weights it was sent, half a gigabyte a copy), which only the ended process would have.
`leave_nothing(remove)` does only the deleting (a client of a server it did not start).
forgeplay ties the temporary Prefect server of a flow (flows/common.py) and the vLLM servers
it starts or reaches (generators/llm/vllm_server.py).

    proc = subprocess.Popen(cmd, start_new_session=True)
    tie(proc.pid, group=True)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

WATCHER = r"""
import glob, os, shutil, signal, sys, time
parent, grace, target, group = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
remove = sys.argv[5:]

def send(sig):
    if target < 0:  # no process to stop: only files to delete
        return sig == 0
    try:
        os.killpg(target, sig) if group else os.kill(target, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False

def alive():
    return send(0)

while os.getppid() == parent and alive():
    time.sleep(0.5)
if alive() and send(signal.SIGTERM):
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.2)
    send(signal.SIGKILL)
if os.getppid() != parent:  # the process ended (else the target did, and its files are still in use)
    for path in [p for pattern in remove for p in glob.glob(pattern)]:
        try:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        except OSError:
            pass
"""


def tie(pid: int, group: bool = False, grace: float = 10.0, remove: Sequence[str | os.PathLike] = ()) -> subprocess.Popen:
    """Stop `pid` (its process group with `group`) once this process has ended, then delete
    what matches `remove` (module docstring); the watcher also ends by itself when `pid` ends
    first, deleting nothing."""
    return subprocess.Popen([sys.executable, "-c", WATCHER, str(os.getpid()), str(grace), str(pid), "1" if group else "0",
                             *map(str, remove)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def leave_nothing(remove: Sequence[str | os.PathLike]) -> subprocess.Popen:
    """Delete what matches `remove` once this process has ended, however it ends; kill the
    returned watcher when the files are gone already."""
    return tie(-1, remove=remove)
