"""Torch threads for a process that runs a model, so that model processes side by side on
one machine (a trainer and its ranks, a rollout server, a synthesis or validation flow, a
test) share the cores instead of oversubscribing them.

Each such process claims a share: it registers in a folder of the machine's model processes
(one file per process, named by its pid and holding its start time, so a dead process or a
reused pid is not counted), and its torch threads are the cores available to it divided by
the live model processes, at least 1. `refresh()` counts again (a directory listing) and is
called before each batch or optimizer step, so a process that started alone gives up
threads when another starts and takes them back when it ends. A fixed count (`threads=`,
the `--threads` options, or FORGEPLAY_THREADS) turns the sharing off for that process; it is
still counted by the others.

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
import warnings
from pathlib import Path

ENV_THREADS = "FORGEPLAY_THREADS"
ENV_DIR = "FORGEPLAY_RUNTIME_DIR"


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


def registry_dir() -> Path:
    d = os.environ.get(ENV_DIR)
    return Path(d) if d else Path(tempfile.gettempdir()) / f"forgeplay-{os.getuid()}" / "model-processes"


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux /proc), None if it is gone;
    "" where /proc is missing (then a live pid is trusted)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of stat; the name in () may hold spaces


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


class CoreShare:
    """This process's share of the cores (see the module docstring); one per process."""

    _mine: "CoreShare | None" = None
    _lock = threading.Lock()

    def __init__(self, threads: int | None, folder: Path):
        self.fixed, self.folder, self.pid = threads, folder, os.getpid()
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
        env = os.environ.get(ENV_THREADS)
        if threads is None and env:
            if not env.isdigit() or int(env) < 1:
                raise ValueError(f"{ENV_THREADS} must be a whole number >= 1, got {env!r}")
            threads = int(env)
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
        others = len([p for p in live_processes(self.folder) if p != self.pid])
        return max(1, available_cores() // (others + 1))

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
