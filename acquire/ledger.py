"""The label budget ledger: what was spent on which prompt, persisted in one SQLite file, so
concurrent requesters (threads or processes) and reruns never spend past the budget and never
pay twice for one prompt.

Every purchase goes reserve -> buy -> settle (or release when the purchase failed):

    ledger = Ledger(path, budget=200)
    r = ledger.reserve("prompt-1", cost=1.0)
    if r.status == "reserved":          # else "paid" (r.label: bought before), "busy", "over_budget"
        try:
            label = source.buy(prompt)
        except Exception:
            ledger.release("prompt-1"); raise
        ... commit the label to the labels shard ...
        ledger.settle("prompt-1", label)

`reserve` runs in one write transaction (BEGIN IMMEDIATE): it counts what is paid plus what
is reserved against the budget, and a prompt has one row at most, so two requesters can
neither both reserve it nor overshoot together. A reservation records its owner (pid and
process start time); `recover(labelled)` ends the reservations of owners that died (a
SIGKILL between reserve and settle): settled when their label reached the labels shard (the
ids in `labelled`), released otherwise, so the ledger and the shard agree.

Prompts handed to people to label (the `queue` source, acquire/sources.py) are recorded
with `enqueue`: nothing is spent until their labels are ingested, but their cost is `held`
so later exports do not offer more than the budget can pay for, and `queued` is the list of
prompt ids an ingested file may name.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from generators.llm.cores import start_time

SCHEMA = """
CREATE TABLE IF NOT EXISTS budget (id INTEGER PRIMARY KEY CHECK (id = 1), amount REAL NOT NULL);
CREATE TABLE IF NOT EXISTS spend (
    prompt_id TEXT PRIMARY KEY, state TEXT NOT NULL CHECK (state IN ('reserved', 'paid')),
    cost REAL NOT NULL, owner TEXT NOT NULL, label TEXT, strategy TEXT,
    reserved_at REAL NOT NULL, settled_at REAL);
CREATE TABLE IF NOT EXISTS queued (
    prompt_id TEXT PRIMARY KEY, cost REAL NOT NULL, strategy TEXT, file TEXT, queued_at REAL NOT NULL);
"""


@dataclass(frozen=True)
class Reservation:
    """What `reserve` did: status reserved, paid (bought before; `label`), busy or over_budget."""

    prompt_id: str
    status: str
    label: str | None = None
    left: float = 0.0  # budget left after this call (reserved counts as spent)


def _me() -> str:
    return f"{os.getpid()}:{start_time(os.getpid())}"


def _alive(owner: str) -> bool:
    pid, _, started = owner.partition(":")
    return start_time(int(pid)) == started


class Ledger:
    """The budget ledger of one dataset's labels (module docstring)."""

    def __init__(self, path, budget: float | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=60)
        try:
            db.executescript(SCHEMA)
        finally:
            db.close()
        if budget is not None:
            self.set_budget(budget)
        elif self.budget is None:
            raise ValueError(f"the ledger {self.path} has no budget yet: give one")

    def _tx(self) -> sqlite3.Connection:
        """A connection whose `with` block is one transaction (autocommit off, 60 s lock wait)."""
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        return _Transaction(db)

    def set_budget(self, amount: float) -> None:
        """Set the total budget (raising it later buys more; lowering it below the spend stops buying)."""
        if amount < 0:
            raise ValueError(f"the budget must be >= 0, got {amount}")
        with self._tx() as db:
            db.execute("INSERT INTO budget VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET amount = excluded.amount",
                       (float(amount),))

    @property
    def budget(self) -> float | None:
        with self._tx() as db:
            row = db.execute("SELECT amount FROM budget").fetchone()
        return row[0] if row else None

    def reserve(self, prompt_id: str, cost: float = 1.0, strategy: str = "") -> Reservation:
        """Reserve `cost` for `prompt_id` if it was never bought, nobody holds it and it fits."""
        if cost < 0:
            raise ValueError(f"a label's cost must be >= 0, got {cost}")
        with self._tx() as db:
            row = db.execute("SELECT state, label FROM spend WHERE prompt_id = ?", (prompt_id,)).fetchone()
            budget, used = _totals(db)
            if row is not None:
                return Reservation(prompt_id, "paid" if row[0] == "paid" else "busy", row[1], budget - used)
            if used + cost > budget + 1e-9:
                return Reservation(prompt_id, "over_budget", None, budget - used)
            db.execute("INSERT INTO spend (prompt_id, state, cost, owner, strategy, reserved_at) VALUES (?, 'reserved', ?, ?, ?, ?)",
                       (prompt_id, float(cost), _me(), strategy, time.time()))
            return Reservation(prompt_id, "reserved", None, budget - used - cost)

    def settle(self, prompt_id: str, label: str, cost: float | None = None) -> None:
        """Mark a reservation paid with its label (and its actual cost, when it differs)."""
        with self._tx() as db:
            cur = db.execute("UPDATE spend SET state = 'paid', label = ?, cost = coalesce(?, cost), settled_at = ? "
                             "WHERE prompt_id = ? AND state = 'reserved'", (label, cost, time.time(), prompt_id))
            if cur.rowcount != 1:
                raise ValueError(f"no reservation of {prompt_id!r} to settle")

    def release(self, prompt_id: str) -> None:
        """Give a reservation's cost back (the purchase failed)."""
        with self._tx() as db:
            db.execute("DELETE FROM spend WHERE prompt_id = ? AND state = 'reserved'", (prompt_id,))

    def recover(self, labelled: set[str] | frozenset[str] = frozenset()) -> dict:
        """End the reservations of dead owners: paid when their prompt is in `labelled`, released
        otherwise; counts of each."""
        out = {"settled": 0, "released": 0}
        with self._tx() as db:
            for pid, owner in db.execute("SELECT prompt_id, owner FROM spend WHERE state = 'reserved'").fetchall():
                if _alive(owner):
                    continue
                if pid in labelled:
                    db.execute("UPDATE spend SET state = 'paid', settled_at = ? WHERE prompt_id = ?", (time.time(), pid))
                    out["settled"] += 1
                else:
                    db.execute("DELETE FROM spend WHERE prompt_id = ?", (pid,))
                    out["released"] += 1
        return out

    def enqueue(self, prompt_ids: list[str], cost: float, strategy: str = "", file: str = "") -> int:
        """Record prompts handed to people to label (in `file`); nothing is spent. A prompt
        queued before keeps its first record; returns how many were new."""
        with self._tx() as db:
            cur = db.executemany("INSERT OR IGNORE INTO queued VALUES (?, ?, ?, ?, ?)",
                                 [(p, float(cost), strategy, file, time.time()) for p in prompt_ids])
            return cur.rowcount

    def queued(self) -> dict[str, dict]:
        """prompt id -> {cost, strategy, file} of every prompt ever queued (bought or not)."""
        with self._tx() as db:
            rows = db.execute("SELECT prompt_id, cost, strategy, file FROM queued").fetchall()
        return {p: {"cost": c, "strategy": s, "file": f} for p, c, s, f in rows}

    def summary(self) -> dict:
        """Budget, paid, reserved and left; labels bought per strategy; prompts queued and
        not bought yet, and the cost they hold."""
        with self._tx() as db:
            budget, used = _totals(db)
            paid = db.execute("SELECT coalesce(sum(cost), 0), count(*) FROM spend WHERE state = 'paid'").fetchone()
            by = dict(db.execute("SELECT strategy, count(*) FROM spend WHERE state = 'paid' GROUP BY 1").fetchall())
            held = db.execute("SELECT count(*), coalesce(sum(cost), 0) FROM queued "
                              "WHERE prompt_id NOT IN (SELECT prompt_id FROM spend)").fetchone()
        return {"budget": budget, "spent": paid[0], "labels": paid[1], "reserved": used - paid[0],
                "left": budget - used, "by_strategy": by, "queued": held[0], "held": held[1]}

    def paid(self) -> dict[str, str | None]:
        """prompt id -> label of every settled purchase."""
        with self._tx() as db:
            return dict(db.execute("SELECT prompt_id, label FROM spend WHERE state = 'paid'").fetchall())


def _totals(db) -> tuple[float, float]:
    budget = db.execute("SELECT amount FROM budget").fetchone()
    used = db.execute("SELECT coalesce(sum(cost), 0) FROM spend").fetchone()[0]
    return (budget[0] if budget else 0.0), used


class _Transaction:
    """`with` = BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error), then close."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind, value, tb) -> None:
        try:
            self.db.execute("ROLLBACK" if kind else "COMMIT")
        finally:
            self.db.close()
