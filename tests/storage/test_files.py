"""Atomic writes (storage/files.py) leave files and folders with the modes a plain write would
(the umask's), not the 0600 / 0700 of their temp paths, and keep the old content on an error."""

import os
import stat

import pytest

from storage.files import UMASK, atomic_path, write_json, write_text


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_written_files_and_folders_get_the_umask_modes(tmp_path):
    assert mode(write_text(tmp_path / "a.txt", "x")) == 0o666 & ~UMASK
    assert mode(write_json(tmp_path / "r" / "run.json", {"a": 1})) == 0o666 & ~UMASK
    with atomic_path(tmp_path / "model", folder=True) as tmp:
        (tmp / "config.json").write_text("{}")
    assert mode(tmp_path / "model") == 0o777 & ~UMASK
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert mode(tmp_path / "a.txt") == mode(plain)


def test_an_error_keeps_the_old_content_and_no_temp_file(tmp_path):
    path = write_text(tmp_path / "a.txt", "old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("new")
            raise RuntimeError("mid-write")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
