"""Atomic file writes: a file or folder appears whole under its name, or not at all.

Everything the project writes outside the shard protocol (storage/shards.py) goes through
here: run records, checkpoints, trained model folders, prepared models, exports, generated
JSONL. The content is written to a hidden temp path beside the target (same file system),
flushed to disk, then `os.replace`d onto the target; an error or a kill leaves the target
as it was, and at most a hidden `.<name>.tmp-*` leftover that readers never look at.

    write_text(path, "hello")                        # also write_json(path, obj)
    with atomic_path(path) as tmp:                   # any writer that takes a path
        pq.write_table(table, tmp)
    with atomic_path(folder, folder=True) as tmp:    # a whole folder (replaces an old one)
        model.save_pretrained(tmp)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once: temp files and folders get the modes a plain open() or mkdir() would give


def temp_prefix(path: Path) -> str:
    """The prefix of the hidden temp paths made for `path` (to clean up leftovers)."""
    return f".{path.name}.tmp-"


def fsync_dir(path: Path) -> None:
    """Make a rename inside folder `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for p in files:
        with open(p, "rb") as f:
            os.fsync(f.fileno())


@contextmanager
def atomic_path(path: str | os.PathLike, folder: bool = False) -> Iterator[Path]:
    """Yield a hidden temp path beside `path` (an empty folder when `folder`, else a file
    name not yet created); when the block ends without error, its content is synced and
    renamed onto `path` (an existing folder is removed first). On error it is deleted."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=temp_prefix(path)))
        os.chmod(tmp, 0o777 & ~UMASK)
    else:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path))
        os.fchmod(fd, 0o666 & ~UMASK)  # mkstemp makes 0600
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        _fsync_tree(tmp)
        if folder and path.exists():  # move the old folder aside first: replace needs an empty target
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=temp_prefix(path)))
            os.replace(path, old / path.name)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    """`obj` as JSON (sorted keys; values JSON does not know, e.g. datetimes, as text)."""
    return write_text(path, json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False, default=str) + "\n")


def remove_leftovers(folder: str | os.PathLike, pattern: str = ".*.tmp-*") -> int:
    """Delete hidden temp paths left in `folder` by killed writes; returns how many."""
    n = 0
    for p in Path(folder).glob(pattern):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        n += 1
    return n
