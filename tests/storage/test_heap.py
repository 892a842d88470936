"""storage/heap.py: after most of many heap blocks are freed between ones that stay, `trim`
hands their pages back (RSS falls), where glibc alone keeps them. Run in a process of its own,
which reports its RSS; nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FRAGMENT = """
import json, sys
from storage.heap import trim

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

base = rss()
blocks = [bytes(4096) + str(i).encode() for i in range(100_000)]  # ~400 MB of heap blocks
kept = blocks[::16]  # one in 16 stays: the arena cannot shrink from its top
del blocks
freed = rss()
did = trim() if sys.argv[1] == "trim" else False
print(json.dumps({"base": base, "freed": freed, "after": rss(), "trimmed": did, "kept": len(kept)}))
"""


def _run(mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", FRAGMENT, mode], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_trim_gives_back_the_pages_of_freed_blocks_that_glibc_keeps():
    if not Path("/proc/self/status").exists():
        pytest.skip("reads RSS from /proc")
    kept, trimmed = _run("keep"), _run("trim")
    if not trimmed["trimmed"]:
        pytest.skip("this C library has no malloc_trim")
    assert kept["after"] - kept["base"] > 300, kept  # glibc keeps the freed blocks' pages
    assert trimmed["after"] - trimmed["base"] < 100, trimmed  # trim gives them back
