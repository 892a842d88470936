"""The dataset manifest: the only list of committed shards that readers trust.

Each dataset directory holds `_manifest.jsonl`, one JSON line per committed shard
(kind, run_id, path relative to the dataset, rows, bytes, sha256, schema_version,
committed_at). A line is appended with a single `write` under an exclusive lock and
fsynced; a torn last line (no newline) is ignored by readers. Files on disk that no line
names are uncommitted leftovers of a killed writer (or compaction) and are never read.
Compaction (storage/compact.py) is the one writer that rewrites the manifest: `replace`
swaps in a whole new one atomically (temp file, fsync, rename), under the same lock.

`Tail` reads a manifest incrementally (what was appended since the last look, or all of it
again after a swap), so a writer's commit costs the same at 10 shards and at 10,000.

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

from storage.files import write_bytes

MANIFEST = "_manifest.jsonl"
QUARANTINE = "_quarantine.json"  # the shards the last `verify` found corrupt (storage/catalog.py)
LOCK = ".lock"
PART_RE = re.compile(r"^part-(\d+)(?:-[0-9a-f]+)?\.parquet$")  # part-00012, or compacted part-00012-<hex>
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
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return parse(data)


def parse(data: bytes) -> list[Entry]:
    """The entries of manifest bytes; a last line without its newline is torn (its writer
    died mid-append) and left out, as is any line that does not parse."""
    lines = data.split(b"\n")
    if not data.endswith(b"\n"):
        lines = lines[:-1]
    entries = []
    for line in lines:
        if not line.strip():
            continue
        try:
            entries.append(Entry(**json.loads(line)))
        except (ValueError, TypeError):
            continue  # a line torn by a crash mid-append
    return entries


def line(entry: Entry) -> bytes:
    """An entry's manifest line, newline included."""
    return (json.dumps(asdict(entry), sort_keys=True) + "\n").encode()


class Tail:
    """Reads one dataset's manifest incrementally. `read()` gives `(entries, whole)`: the
    entries appended since the previous call (`whole` False), or every entry (`whole` True)
    on the first call and whenever the manifest was swapped since (a compaction), which it
    notices because the last line it read is no longer where it read it. Only whole lines
    are consumed; a torn last line is read again (and then skipped) once repaired."""

    def __init__(self, dataset_dir: Path):
        self.path = Path(dataset_dir) / MANIFEST
        self.offset = 0  # bytes consumed: the end of the last whole line read
        self.last = b""  # that line, newline included

    def read(self) -> tuple[list[Entry], bool]:
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:  # no commit yet (or the dataset was removed): nothing, in whole
            self.offset, self.last = 0, b""
            return [], True
        with f:
            whole = not self.offset
            if not whole:
                f.seek(self.offset - len(self.last))
                whole = f.read(len(self.last)) != self.last
            start = 0 if whole else self.offset
            f.seek(start)
            data = f.read()
        self.seen(data[:data.rfind(b"\n") + 1], start)
        return parse(data), whole

    def seen(self, data: bytes, start: int = 0) -> None:
        """Mark `data` (whole lines, found at byte `start` of the manifest) as read: e.g. the
        manifest its caller just wrote."""
        if data:
            self.offset = start + len(data)
            self.last = data[data.rfind(b"\n", 0, len(data) - 1) + 1:]
        elif not start:
            self.offset, self.last = 0, b""


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
    data = line(entry)
    path = dataset_dir / MANIFEST
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # A torn previous line (crash mid-append) must not swallow this one.
        if os.fstat(fd).st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(dataset_dir: Path, entries: list[Entry]) -> bytes:
    """Swap in a manifest of exactly `entries`, atomically: written to a hidden temp file,
    fsynced, renamed over the old one, the folder fsynced (caller holds `locked`). Returns
    the bytes written. A kill leaves the old manifest or the new one, never a mixture."""
    data = b"".join(line(e) for e in entries)
    write_bytes(Path(dataset_dir) / MANIFEST, data)
    return data


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 4 MiB chunks (the checksum a manifest entry keeps)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()
