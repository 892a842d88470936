"""Packages above `train` that add training stage kinds or labellers, loaded by name.

`train` may not import the packages above it (the layering in pyproject.toml), so they are
listed as entry points of the group `forgeplay.plugins` in pyproject.toml, each a module
whose import registers its parts (`train.stages.register`, `train.labelled.register_labeller`):

    [project.entry-points."forgeplay.plugins"]
    labels = "acquire.training"      # label-aware GRPO's labellers (--labels)
    selfplay = "selfplay.update"     # the self-play examiner and student updates

Whoever reads those registries calls `load()` first (train/stages.py, train/labelled.py), so
`forgeplay train`, the `train` flow and `python -m train` (under torchrun too) see the same
kinds, and a package installed beside forgeplay adds its own by listing itself in the group.
(Entry points are read from the installed package: after editing the group, `make setup`
installs it again, as it does whenever pyproject.toml changes.)
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

GROUP = "forgeplay.plugins"
_loaded: list[str] = []


def load() -> list[str]:
    """Import every plugin module once; their names."""
    if not _loaded:
        for module in dict.fromkeys(ep.value for ep in entry_points(group=GROUP)):
            importlib.import_module(module)
            _loaded.append(module)
    return list(_loaded)
