"""Ingesting queue files that people filled in (`forgeplay labels ingest`): the other half of
the `queue` source (acquire/sources.py). The whole of every file is checked first; any
problem (a missing column, an unknown or empty prompt id, an empty label, one prompt id
with two different labels, a row with the wrong number of fields) is a `MalformedQueue`
naming the file and its line numbers (CSV: the header is line 1; Parquet: rows from 1), and
nothing is written or spent. Then the rows are bought in file order through the ledger
(acquire/buy.py: reserve, commit the labels shard, settle; source `queue`, the strategy
that queued the prompt), so a prompt paid before costs nothing again (`already_paid`),
ingesting the same file twice spends nothing the second time, and rows past the budget are
reported (`not_ingested`), not bought.

    result = ingest(root, "world_labels", ["filled.csv"])
    result["bought"], result["already_paid"], result["not_ingested"]
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

from acquire.buy import buy, labelled_ids
from acquire.ledger import Ledger
from acquire.sources import FilledQueue

MAX_ERRORS = 20


class MalformedQueue(ValueError):
    """A filled-in queue file that cannot be ingested; `errors` are "file: line N: why" lines."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        more = f"\n  ... and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        super().__init__("nothing was ingested:\n  " + "\n  ".join(errors[:MAX_ERRORS]) + more)


def read_rows(path) -> tuple[list[tuple[str, dict]], list[str]]:
    """(where, row) pairs of a .csv or .parquet file and the errors found reading it; `where`
    is "line N" (CSV) or "row N" (Parquet)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no queue file {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path)
    raise ValueError(f"{path}: a queue file is .csv or .parquet, not {suffix or 'without an extension'}")


def _read_csv(path: Path) -> tuple[list[tuple[str, dict]], list[str]]:
    rows, errors = [], []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, strict=True)
            header, last = None, 0
            for record in reader:
                start, last = last + 1, reader.line_num
                if not record or all(not v.strip() for v in record):
                    continue
                if header is None:
                    header = [h.strip() for h in record]
                    missing = [c for c in ("prompt_id", "label") if c not in header]
                    if missing:
                        errors.append(f"line {start}: missing column(s) {', '.join(missing)} (header: {', '.join(header)})")
                        break
                    continue
                if len(record) != len(header):
                    errors.append(f"line {start}: {len(record)} fields, the header has {len(header)}")
                    continue
                rows.append((f"line {start}", dict(zip(header, record))))
    except UnicodeDecodeError as e:
        return [], [f"not UTF-8 text ({e.reason} at byte {e.start})"]
    except csv.Error as e:
        return [], [f"line {reader.line_num}: {e}"]
    if header is None:
        errors.append("line 1: no header (prompt_id, question, label)")
    return rows, errors


def _read_parquet(path: Path) -> tuple[list[tuple[str, dict]], list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        return [], [f"not a Parquet file: {e}"]
    missing = [c for c in ("prompt_id", "label") if c not in table.column_names]
    if missing:
        return [], [f"missing column(s) {', '.join(missing)} (columns: {', '.join(table.column_names)})"]
    types = {c: table.schema.field(c).type for c in ("prompt_id", "label")}
    errors = [f"column {c} is {t}, not text" for c, t in types.items()
              if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))]
    if errors:
        return [], errors
    return [(f"row {i + 1}", r) for i, r in enumerate(table.select(["prompt_id", "label"]).to_pylist())], []


def check(files: list, known: dict[str, dict]) -> tuple[list[tuple[str, str]], list[str]]:
    """(prompt_id, label) pairs in file order (duplicates with the same label once) and every
    problem, each as "file: line N: why"."""
    pairs, errors, seen = [], [], {}
    for path in files:
        rows, errs = read_rows(path)
        errors += [f"{path}: {e}" for e in errs]
        if not rows and not errs:
            errors.append(f"{path}: no label rows")
        for where, row in rows:
            pid = (row.get("prompt_id") or "").strip()
            label = (row.get("label") or "").strip()
            if not pid:
                errors.append(f"{path}: {where}: no prompt_id")
            elif pid not in known:
                errors.append(f"{path}: {where}: unknown prompt id {pid!r} (never queued for labelling here)")
            elif not label:
                errors.append(f"{path}: {where}: empty label for prompt {pid!r}")
            elif pid in seen:
                first, before = seen[pid]
                if before != label:
                    errors.append(f"{path}: {where}: prompt {pid!r} has label {label!r}, but {first} gave it {before!r}")
            else:
                seen[pid] = (f"{path}: {where}", label)
                pairs.append((pid, label))
    return pairs, errors


def ingest(root, dataset: str, files: list) -> dict:
    """Check every file, then buy their labels (module docstring); counts, the prompt ids
    not ingested (over the budget or busy) and the ledger's summary."""
    from storage.manifest import dataset_dir
    from storage.resumable import RunWriter

    path = dataset_dir(root, dataset) / "_ledger.sqlite"
    if not path.exists():
        raise FileNotFoundError(f"dataset {dataset!r} has no label ledger ({path}): "
                                "run forgeplay acquire-labels --source queue first")
    if not files:
        raise ValueError("give at least one --file")
    ledger = Ledger(path)
    known = ledger.queued()
    pairs, errors = check(list(files), known)
    if errors:
        raise MalformedQueue(errors)
    ledger.recover(labelled_ids(root, dataset))  # a killed ingest's commits count as paid
    before = ledger.paid()
    digest = hashlib.sha256()
    for f in files:
        digest.update(Path(f).read_bytes())
    writer = RunWriter(root, f"ingest-{digest.hexdigest()[:12]}", {"config_hash": digest.hexdigest()[:16]})
    counts = {"rows": len(pairs), "bought": 0, "already_paid": 0, "busy": 0, "over_budget": 0}
    groups: dict[tuple[str, float], list[str]] = {}
    for pid, _ in pairs:  # one buy per (strategy, cost) that queued the prompts, in file order
        groups.setdefault((known[pid]["strategy"] or "", known[pid]["cost"]), []).append(pid)
    labels, bought = dict(pairs), {}
    for (strategy, cost), pids in groups.items():
        got = buy(ledger, FilledQueue({p: labels[p] for p in pids}, cost), pids, writer, dataset, strategy)
        bought.update(got["labels"])
        for k in ("bought", "already_paid", "busy", "over_budget"):
            counts[k] += got[k]
    counts["changed"] = sum(1 for pid, label in pairs if pid in before and before[pid] != label)
    counts["not_ingested"] = [pid for pid, _ in pairs if pid not in bought and pid not in before]
    return {**counts, "ledger": ledger.summary()}
