"""The package layering of ARCHITECTURE.md, as import-linter contracts in pyproject.toml:
flows > selfplay > train | validators > generators > storage, and no import circle inside
any package. A back-edge fails here, so it fails CI."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(tmp_path, capsys, monkeypatch):
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=str(tmp_path), no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 kept, 0 broken" in out


def test_a_back_edge_breaks_the_layers(tmp_path, capsys, monkeypatch):
    """The contract is live: a copy of the tree with storage importing train fails it."""
    import shutil

    from importlinter.cli import lint_imports

    for pkg in ("flows", "selfplay", "train", "validators", "generators", "storage"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "storage" / "bad.py").write_text("import train.configs\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in list(os.sys.modules) if m.split(".")[0] in ("flows", "train", "storage", "generators",
                                                                          "validators", "selfplay")]:
        monkeypatch.delitem(os.sys.modules, name)
    code = lint_imports(config_filename=str(tmp_path / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 1
    assert "storage is not allowed to import train" in out or "storage.bad -> train.configs" in out
