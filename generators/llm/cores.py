"""Torch threads for a process that runs a model, so that model processes side by side on
one machine (a trainer and its ranks, a rollout server, a synthesis or validation flow, a
test) share the cores instead of oversubscribing them.

Each such process claims a share: it registers in a folder of the machine's model processes
(one file per process, named by its pid and holding its start time, so a dead process or a
reused pid is not counted), and its torch threads are the cores available to it divided by
the registered processes that are computing, itself included, at least 1. A registered
process that waits (a test runner between models, the client of a model server) uses under
a tenth of a core and takes no share. `refresh()` counts again (a directory listing and the
others' CPU times) and is called before each batch or optimizer step, so a process that
started alone gives up threads when another starts computing and takes them back when it
ends or waits. A fixed count (`threads=`, the `--threads` options, or FORGEPLAY_THREADS)
turns the sharing off for that process; the others still count it.

    share = CoreShare.claim()      # once per process; sets torch's threads
    share.refresh()                # before each batch: follow the other model processes

The folder is FORGEPLAY_RUNTIME_DIR, else `<tmp>/forgeplay-<uid>/model-processes`.
"""

from __future__ import annotations

import atexit
import math
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

ENV_THREADS = "FORGEPLAY_THREADS"
ENV_DIR = "FORGEPLAY_RUNTIME_DIR"
IDLE_BELOW = 0.25  # of a core: a model process using less is waiting, not computing (an idle vLLM worker polls at ~0.11)
FIRST_LOOK = 0.2  # seconds a newly seen process is watched before it is judged


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def env_threads() -> int | None:
    """The count FORGEPLAY_THREADS fixes, None when it is unset; ValueError when it is not a
    whole number >= 1."""
    env = os.environ.get(ENV_THREADS)
    if not env:
        return None
    if not env.isdigit() or int(env) < 1:
        raise ValueError(f"{ENV_THREADS} must be a whole number >= 1, got {env!r}")
    return int(env)


def registry_dir() -> Path:
    d = os.environ.get(ENV_DIR)
    return Path(d) if d else Path(tempfile.gettempdir()) / f"forgeplay-{os.getuid()}" / "model-processes"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the process name (which may hold spaces and
    parentheses), so field k of proc(5) is index k - 3; None if the process is gone or has
    exited and waits to be reaped (a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux /proc), None if it is gone;
    "" where /proc is missing (then a live pid is trusted)."""
    if Path("/proc/self/stat").exists():
        fields = _stat(pid)
        return fields[19] if fields else None  # field 22: starttime
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return ""


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) the process has used so far; None if it is gone."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else None  # fields 14, 15


def live_processes(folder: Path | None = None) -> list[int]:
    """Pids of the registered model processes still running; stale files are removed."""
    folder = folder or registry_dir()
    pids = []
    for f in folder.glob("*.pid") if folder.is_dir() else ():
        try:
            pid, started = int(f.stem), f.read_text().strip()
        except (OSError, ValueError):
            continue  # being written, or not ours
        now = start_time(pid)
        if now is not None and (now == started or now == ""):
            pids.append(pid)
        else:
            f.unlink(missing_ok=True)
    return sorted(pids)


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = list(Path(f"/proc/{p}/task").glob("*/children"))
        except OSError:  # it exited while we looked
            continue
        for task in tasks:
            try:
                todo += [int(c) for c in task.read_text().split()]
            except (OSError, ValueError):
                pass
    return out


def register(pids: list[int], folder: Path | None = None) -> list[Path]:
    """Count other processes that run a model (a vLLM server's engine, started by this one)
    as model processes; their files go stale, and are removed, when they exit."""
    folder = folder or registry_dir()
    files = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for pid in pids:
            started = start_time(pid)
            if started is None:
                continue
            tmp, f = folder / f".{pid}.tmp", folder / f"{pid}.pid"
            tmp.write_text(started)
            os.replace(tmp, f)
            files.append(f)
    except OSError as e:
        warnings.warn(f"cannot register model processes in {folder} ({e}); set {ENV_DIR} to a writable folder")
    return files


class CoreShare:
    """This process's share of the cores (see the module docstring); one per process."""

    _mine: "CoreShare | None" = None
    _lock = threading.Lock()

    def __init__(self, threads: int | None, folder: Path):
        self.fixed, self.folder, self.pid = threads, folder, os.getpid()
        self._cpu: dict[int, tuple[float, float, bool]] = {}  # other pid -> (CPU seconds, when, busy)
        self.file = folder / f"{self.pid}.pid"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{self.pid}.tmp"
            tmp.write_text(start_time(self.pid) or "")
            os.replace(tmp, self.file)
        except OSError as e:  # a folder we cannot write: count the others, stay unseen
            warnings.warn(f"cannot register this model process in {folder} ({e}); set {ENV_DIR} to a writable folder")
        atexit.register(self.release)

    @classmethod
    def claim(cls, threads: int | None = None) -> "CoreShare":
        """Register this process (once) and set its torch threads. `threads` (else
        FORGEPLAY_THREADS) fixes the count; a later claim with a count replaces it."""
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if threads is None:
            threads = env_threads()
        with cls._lock:
            if cls._mine is None or cls._mine.file.parent != registry_dir() or cls._mine.pid != os.getpid():
                cls._mine = cls(threads, registry_dir())
            elif threads is not None:
                cls._mine.fixed = threads
            mine = cls._mine
        mine.refresh()
        return mine

    def threads(self) -> int:
        """The threads this process should use now."""
        if self.fixed:
            return self.fixed
        return max(1, available_cores() // (self.busy_others() + 1))

    def busy_others(self) -> int:
        """The other live model processes that use the CPU: at least IDLE_BELOW of a core
        between this look and the previous one (a process seen for the first time is
        watched for FIRST_LOOK seconds), so a registered process that waits (a test runner
        between models, a client of a model server) takes no share."""
        pids = [p for p in live_processes(self.folder) if p != self.pid]
        for gone in set(self._cpu) - set(pids):
            del self._cpu[gone]
        new = [p for p in pids if p not in self._cpu]
        for p in new:
            self._cpu[p] = (cpu_seconds(p) or 0.0, time.monotonic(), True)
        if new:
            time.sleep(FIRST_LOOK)
        busy = 0
        for p in pids:
            used, (used0, t0, was) = cpu_seconds(p), self._cpu[p]
            if used is None:
                continue
            now = time.monotonic()
            if now - t0 >= FIRST_LOOK:  # else too short a look: keep what was seen
                was = (used - used0) / (now - t0) >= IDLE_BELOW
                self._cpu[p] = (used, now, was)
            busy += was
        return busy

    def refresh(self) -> int:
        """Set torch's threads to `threads()` when they differ; returns the count."""
        import torch

        n = self.threads()
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
        return n

    def release(self) -> None:
        """Leave the registry (at exit, or when the process stops running models)."""
        if self.pid == os.getpid():
            self.file.unlink(missing_ok=True)
