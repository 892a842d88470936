"""The dataset manifest: the only list of committed shards that readers trust.

Each dataset directory holds `_manifest.jsonl`, one JSON line per committed shard
(kind, run_id, path relative to the dataset, rows, bytes, sha256, schema_version,
committed_at). A line is appended with a single `write` under an exclusive lock and
fsynced; a torn last line (no newline) is ignored by readers. Files on disk that no line
names are uncommitted leftovers of a killed writer and are never read.

`resolve_root` applies the data-root rule used by every command: an explicit path, else
`$FORGEPLAY_DATA`, else `./data`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

MANIFEST = "_manifest.jsonl"
QUARANTINE = "_quarantine.json"  # the shards the last `verify` found corrupt (storage/catalog.py)
LOCK = ".lock"
PART_RE = re.compile(r"^part-(\d+)\.parquet$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """--data-root, else $FORGEPLAY_DATA, else ./data."""
    if root:
        return Path(root)
    return Path(os.environ.get("FORGEPLAY_DATA") or "data")


def quarantined(ddir: Path) -> set[str]:
    """Paths (relative to the dataset folder `ddir`) of the shards the last `verify` found corrupt:
    readers and the catalog leave them out."""
    try:
        return set(json.loads((ddir / QUARANTINE).read_text()))
    except (FileNotFoundError, ValueError):
        return set()


def check_name(what: str, name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise ValueError(f"invalid {what} {name!r}: use letters, digits, '_', '-', '.'")
    return name


@dataclass(frozen=True)
class Entry:
    """One committed shard."""

    kind: str
    run_id: str
    path: str
    rows: int
    bytes: int
    sha256: str
    schema_version: int
    committed_at: str

    def abspath(self, dataset_dir: Path) -> Path:
        return dataset_dir / self.path


def dataset_dir(root: Path, dataset: str) -> Path:
    return Path(root) / check_name("dataset name", dataset)


def read(dataset_dir: Path) -> list[Entry]:
    """All committed entries of a dataset, in commit order (torn last line ignored)."""
    path = Path(dataset_dir) / MANIFEST
    if not path.exists():
        return []
    entries = []
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if not data.endswith(b"\n"):
        lines = lines[:-1]  # the last line is torn: its writer died mid-append
    for line in lines:
        if not line.strip():
            continue
        try:
            entries.append(Entry(**json.loads(line)))
        except (ValueError, TypeError):
            continue  # a line torn by a crash mid-append
    return entries


def datasets(root: Path) -> list[str]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).exists())


@contextmanager
def locked(dataset_dir: Path) -> Iterator[None]:
    """Exclusive lock on a dataset while a shard is committed."""
    dataset_dir.mkdir(parents=True, exist_ok=True)
    with open(dataset_dir / LOCK, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def next_part(run_dir: Path, entries: list[Entry], rel_run_dir: str) -> int:
    """First part number above every committed entry and every file already on disk."""
    used = [-1]
    for e in entries:
        if e.path.startswith(rel_run_dir + "/"):
            m = PART_RE.match(e.path.rsplit("/", 1)[1])
            if m:
                used.append(int(m.group(1)))
    if run_dir.is_dir():
        for p in run_dir.iterdir():
            m = PART_RE.match(p.name)
            if m:
                used.append(int(m.group(1)))
    return max(used) + 1


def append(dataset_dir: Path, entry: Entry) -> None:
    """Append one entry durably (caller holds `locked`)."""
    line = (json.dumps(asdict(entry), sort_keys=True) + "\n").encode()
    path = dataset_dir / MANIFEST
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # A torn previous line (crash mid-append) must not swallow this one.
        if os.fstat(fd).st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 4 MiB chunks (the checksum a manifest entry keeps)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()
