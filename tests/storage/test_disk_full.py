"""A full disk during a commit (ENOSPC injected where the shard's bytes reach the disk, the
one boundary faked): the writer raises DiskFull with a message that says what happened and
what to do, keeps nothing of the failed shard (no temp file, no manifest entry), leaves the
committed shards readable and unchanged, and a rerun once space is back commits the rest
without duplicates."""

import errno
import os

import pytest

import storage.shards as shards
from storage import load_table
from storage.manifest import dataset_dir, read
from storage.shards import DiskFull, write_rows


def rows(start: int, n: int) -> list[dict]:
    return [{"doc_id": f"d{i}", "title": f"T{i}", "text": f"text {i}", "source": "test"} for i in range(start, start + n)]


def test_a_full_disk_keeps_the_committed_state_and_says_so(tmp_path, monkeypatch):
    write_rows(tmp_path, "full", "documents", "r1", rows(0, 5))
    before = read(dataset_dir(tmp_path, "full"))

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shards.os, "fsync", no_space)
    with pytest.raises(DiskFull) as e:
        write_rows(tmp_path, "full", "documents", "r1", rows(0, 10))
    msg = str(e.value)
    assert "no space left" in msg and "documents" in msg and "full" in msg and "rerun" in msg
    assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()

    assert read(dataset_dir(tmp_path, "full")) == before
    assert not [p for p in dataset_dir(tmp_path, "full").rglob("*") if p.name.endswith(".tmp")]
    assert sorted(load_table("full", "documents", tmp_path).column("doc_id").to_pylist()) == sorted(f"d{i}" for i in range(5))

    write_rows(tmp_path, "full", "documents", "r1", rows(0, 10))  # space is back: the rest, once
    ids = load_table("full", "documents", tmp_path).column("doc_id").to_pylist()
    assert sorted(ids) == sorted(f"d{i}" for i in range(10))
