"""Stopping a command: SIGTERM ends any `forgeplay` command the way Ctrl-C does, within seconds,
with one line that says how to resume.

Every stage commits whole chunks (a manifest swap; storage/resumable.py), so what a stopped
command had committed stays and a rerun skips it. SIGTERM is turned into KeyboardInterrupt in
the main thread: `finally` blocks run (model servers and worker pools are stopped, a chunk being
written is dropped, never half kept) and the command prints where to resume, then exits 130
(Ctrl-C) or 143 (SIGTERM). A second SIGTERM ends the process at once. A command that knows a
better way back names it (`resume_with`: `forgeplay run --resume RUN_ID`); the default is to run
the same command again.

    guarded(app)                         # flows/cli.py's main()
    resume_with("forgeplay run --resume run-3f2a9c0d1e2b")
"""

from __future__ import annotations

import os
import signal
import sys

AGAIN = "run the same command again to resume: what it committed is kept and skipped"
_state = {"hint": AGAIN, "signal": None}


def resume_with(hint: str) -> None:
    """What the stop line tells the user to run (once a run id is known)."""
    _state["hint"] = hint


def _on_term(signum, frame) -> None:
    if _state["signal"] is not None:  # the second one: no more waiting
        os._exit(128 + signum)
    _state["signal"] = signum
    raise KeyboardInterrupt


def guarded(app) -> None:
    """Run `app` (the Typer app) with SIGTERM stopping it as above."""
    if threading_main():
        signal.signal(signal.SIGTERM, _on_term)
    try:
        app()
    except KeyboardInterrupt:
        _stopped()
    except SystemExit as e:  # Typer turns KeyboardInterrupt into exit code 130
        if e.code == 128 + signal.SIGINT or _state["signal"] is not None:
            _stopped()
        raise


def _stopped() -> None:
    signum = _state["signal"]
    name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
    print(f"stopped by {name}; {_state['hint']}", file=sys.stderr, flush=True)
    sys.exit(128 + (signum or signal.SIGINT))


def threading_main() -> bool:
    """Signal handlers can only be set from the main thread (a CLI called from a test thread
    keeps the default)."""
    import threading

    return threading.current_thread() is threading.main_thread()
