"""The label budget: concurrent requesters (threads and processes) never overspend and never
pay twice for a prompt; a requester SIGKILLed between its commit and its settle is repaired
by a rerun, after which the ledger and the labels shard agree. Real SQLite, real shards."""

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from acquire.buy import ColumnSource, buy, labelled_ids
from acquire.ledger import Ledger
from storage import load_table
from storage.resumable import RunWriter

REPO = Path(__file__).resolve().parents[2]
PROMPTS = [f"p{i:02d}" for i in range(30)]
ANSWERS = {p: f"answer {p}" for p in PROMPTS}


def test_reserve_settle_release_and_the_budget():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        ledger = Ledger(Path(d) / "ledger.sqlite", budget=2)
        assert ledger.reserve("a").status == "reserved"
        assert ledger.reserve("a").status == "busy"  # held by a requester
        ledger.settle("a", "Paris")
        again = ledger.reserve("a")
        assert again.status == "paid" and again.label == "Paris"  # bought before: nothing spent
        assert ledger.reserve("b", cost=1.5).status == "over_budget"
        assert ledger.reserve("b").status == "reserved"
        ledger.release("b")
        assert ledger.summary() == {"budget": 2, "spent": 1.0, "labels": 1, "reserved": 0.0, "left": 1.0,
                                    "by_strategy": {"": 1}, "queued": 0, "held": 0}
        with pytest.raises(ValueError, match="no reservation"):
            ledger.settle("b", "x")
        with pytest.raises(ValueError, match="no budget"):
            Ledger(Path(d) / "other.sqlite")


def _requester(path: str, root: str, seed: int, barrier=None) -> None:
    """Buy labels for every prompt in a shuffled order, in small batches."""
    order = PROMPTS[:]
    random.Random(seed).shuffle(order)
    if barrier is not None:
        barrier.wait()
    ledger, writer = Ledger(path), RunWriter(root, f"buyer-{seed}")
    for i in range(0, len(order), 3):
        buy(ledger, ColumnSource(ANSWERS), order[i:i + 3], writer, "d", "random")


def _check(path, root, budget: int) -> None:
    ledger = Ledger(path)
    paid = ledger.paid()
    shard = load_table("d", "labels", root).to_pylist()
    assert len(paid) == budget and ledger.summary()["spent"] == budget  # the whole budget, no more
    assert Counter(r["prompt_id"] for r in shard) == Counter(paid.keys())  # each label bought once, in both
    assert all(r["label"] == ANSWERS[r["prompt_id"]] == paid[r["prompt_id"]] for r in shard)


def test_threads_never_overspend_or_pay_twice(tmp_path):
    path, barrier = tmp_path / "ledger.sqlite", threading.Barrier(6)
    Ledger(path, budget=20)
    threads = [threading.Thread(target=_requester, args=(str(path), str(tmp_path), s, barrier)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _check(path, tmp_path, 20)


def test_processes_never_overspend_or_pay_twice(tmp_path):
    path = tmp_path / "ledger.sqlite"
    Ledger(path, budget=17)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_requester, args=(str(path), str(tmp_path), s)) for s in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * 4
    _check(path, tmp_path, 17)


KILLED = """
import os, signal, sys
sys.path.insert(0, {repo!r})
import acquire.ledger as L
from acquire.buy import ColumnSource, buy
from storage.resumable import RunWriter
from tests.acquire.test_ledger import ANSWERS, PROMPTS
real = L.Ledger.settle
def settle(self, pid, label, cost=None):
    if pid == PROMPTS[3]:  # the labels of this batch are committed; die before settling the last
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, pid, label, cost)
L.Ledger.settle = settle
ledger = L.Ledger({path!r}, budget=10)
buy(ledger, ColumnSource(ANSWERS), PROMPTS[:2], RunWriter({root!r}, "buyer"), "d", "care")
ledger.reserve(PROMPTS[4])  # reserved, never bought
buy(ledger, ColumnSource(ANSWERS), PROMPTS[2:4], RunWriter({root!r}, "buyer"), "d", "care")
"""


def test_a_sigkill_between_commit_and_settle_is_repaired_and_a_rerun_buys_nothing_twice(tmp_path):
    path = tmp_path / "ledger.sqlite"
    proc = subprocess.run([sys.executable, "-c", KILLED.format(repo=str(REPO), path=str(path), root=str(tmp_path))],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    ledger = Ledger(path)
    assert ledger.summary()["reserved"] == 2 and len(ledger.paid()) == 3  # p02 settled, p03 only committed
    assert ledger.recover(labelled_ids(tmp_path, "d")) == {"settled": 1, "released": 1}
    ledger.reserve(PROMPTS[5])  # a live requester's reservation survives recovery
    assert ledger.recover(labelled_ids(tmp_path, "d")) == {"settled": 0, "released": 0}
    ledger.release(PROMPTS[5])
    assert sorted(ledger.paid()) == PROMPTS[:4] and ledger.summary()["reserved"] == 0
    counts = buy(ledger, ColumnSource(ANSWERS), PROMPTS[:8], RunWriter(tmp_path, "rerun"), "d", "care")
    assert counts["already_paid"] == 4 and counts["bought"] == 4
    shard = load_table("d", "labels", tmp_path).to_pylist()
    assert Counter(r["prompt_id"] for r in shard) == Counter(ledger.paid().keys()) == Counter(PROMPTS[:8])
    assert ledger.summary()["spent"] == 8 and os.path.exists(path)
