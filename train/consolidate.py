"""A sharded checkpoint (train/checkpoint.py `save_sharded`) as a plain Hugging Face model
folder, in one process without a process group: the model's config from the checkpoint's
`model/`, a float32 model built from it, its weights read from the torch.distributed.checkpoint
folder (the optimizer state is not read), the tokenizer of the run's model. What
`forgeplay train consolidate RUN --out DIR` does; the folder loads in any backend.

    consolidate_run("runs/sft-7b", "runs/sft-7b/consolidated")   # the run's latest checkpoint
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from storage.files import atomic_path
from train.checkpoint import SHARDED, latest


def consolidate_run(run: str | Path, out: str | Path, model: str | None = None) -> Path:
    """Consolidate `run` (a run folder: its latest checkpoint; or a checkpoint folder) into `out`,
    with the tokenizer of `model` (default: the run's own --model, from its config.json)."""
    from generators.llm.model_store import resolve_model

    run = Path(run)
    path = run if (run / "state.json").exists() else latest(run)
    if path is None:
        raise ValueError(f"{run} has no complete checkpoint (nor is it one)")
    if model is None:
        cfg = path.parent.parent / "config.json"  # RUN/checkpoints/step-N -> RUN/config.json
        stage = json.loads(cfg.read_text()) if cfg.exists() else {}
        model = next((v.get("model") for k, v in stage.items() if isinstance(v, dict) and "model" in v), None)
    return consolidate(path, out, resolve_model(model))


def consolidate(path: str | Path, out: str | Path, tokenizer: str | Path | None = None) -> Path:
    """Write the model of sharded checkpoint `path` (`save_sharded`) as a plain Hugging Face folder `out`
    (float32 weights, its config, the tokenizer of `tokenizer` when given), atomically; in this
    process alone, no process group."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "state.json").exists() or not (path / "model" / "config.json").exists():
        raise ValueError(f"{path} is not a complete sharded checkpoint (no state.json or model/config.json)")
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path / "model"), dtype=torch.float32)
    saved = dcp.FileSystemReader(path / SHARDED).read_metadata().state_dict_metadata
    sd = {k: v for k, v in model.state_dict().items() if f"model.{k}" in saved}
    missing = [k for k in model.state_dict() if k not in sd and not _tied(model, k)]
    if missing:
        raise ValueError(f"{path}: the checkpoint lacks {', '.join(missing[:3])}")
    dcp.load({"model": sd}, checkpoint_id=path / SHARDED, no_dist=True)
    model.load_state_dict(sd, strict=False)
    model.tie_weights()
    with atomic_path(Path(out), folder=True) as tmp:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            AutoTokenizer.from_pretrained(tokenizer).save_pretrained(tmp)
    return Path(out)


def _tied(model, key: str) -> bool:
    """Whether state-dict entry `key` is the output layer tied to the input embeddings."""
    out = model.get_output_embeddings()
    return bool(getattr(model.config, "tie_word_embeddings", False)) and out is not None and key.endswith(
        "lm_head.weight")
