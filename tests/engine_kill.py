"""Killing a stage mid-way against the stand-in engine, as the resume tests do: wait for a
condition, stop the engine's answers, wait until the stage's journal holds every answer the
engine completed, then kill -9 the stage's process."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def wait(cond, seconds: float = 120.0, what: str = "") -> None:
    """Poll `cond` every 50 ms; AssertionError after `seconds`."""
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def journal_lines(path: Path) -> int:
    """Answers a journal holds (a line cut short by a kill is not one)."""
    return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.exists() else 0


def kill_once_journaled(proc: subprocess.Popen, engine, journal: Path, ready, what: str) -> None:
    """Once `ready()` (the process still running: else an AssertionError with its stderr),
    pause `engine` so that what it completed is all the client has seen, wait until `journal`
    holds that many answers, kill -9 `proc`, and let the engine answer again."""
    try:
        wait(lambda: ready() or proc.poll() is not None, what=what)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        engine.pause()
        wait(lambda: journal_lines(journal) >= engine.completed, 30, "the journal to catch up")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        engine.resume()
