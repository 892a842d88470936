"""Atomic training checkpoints: write a folder, rename it into place, then point `latest` at it.

Layout of a run folder:

    RUN_DIR/checkpoints/step-00000010/  model.pt optimizer.pt scheduler.pt rng.pt state.json
                                        extra-NAME.pt (a stage's own state, e.g. CARE's probes)
    RUN_DIR/checkpoints/latest          text file holding "step-00000010"

A sharded run (`--shard full|grad_op`, train/shard.py) saves `sharded/` instead of model.pt and
optimizer.pt: the model's and AdamW's state as torch.distributed.checkpoint writes them, each
rank its own shards (`save_sharded`, a collective; `restore_sharded` reads them back on any
number of ranks), and `model/config.json`, the model's config. train/consolidate.py turns such
a checkpoint into a plain model folder (`forgeplay train consolidate`) in one process.

A checkpoint is first written to a hidden temp folder next to its final place, then
renamed into place; `latest` is written last, also atomically (storage/files.py). A kill at any
moment leaves either the previous complete checkpoint or the new one as `latest`, never a
half-written one. `state.json` holds the step, the data position and any extra JSON state.

    from train.checkpoint import save, latest, restore
    save(run_dir, step, model, optimizer, scheduler, {"epoch": 0, "index": 64})
    path = latest(run_dir)            # None when the run has no complete checkpoint
    state = restore(path, model, optimizer, scheduler)   # also restores RNG states
    prune(run_dir)                    # once run_dir/final is written: the checkpoints go
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from storage.files import atomic_path, fsync_dir, remove_leftovers, write_text

LATEST = "latest"
SHARDED = "sharded"  # the torch.distributed.checkpoint folder of a sharded checkpoint


def ckpt_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save(run_dir: str | Path, step: int, model: torch.nn.Module, optimizer: Any = None, scheduler: Any = None,
         state: dict | None = None, keep: int = 2, extras: dict | None = None) -> Path:
    """Write checkpoint `step` atomically and make it `latest`; keep the newest `keep` ones.
    `extras`: name -> object with `state_dict()` saved beside the model (`extra-NAME.pt`)."""
    base = ckpt_dir(run_dir)
    base.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:08d}"
    final = base / name
    with atomic_path(final, folder=True) as tmp:  # a rerun of the same step replaces the old copy
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp / "model.pt")
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        _rest(tmp, step, scheduler, state, {k: o.state_dict() for k, o in (extras or {}).items()})
    write_text(base / LATEST, name)
    _prune(base, keep, name)
    return final


def _rest(tmp: Path, step: int, scheduler, state: dict | None, extra_states: dict) -> None:
    if scheduler is not None:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    for key, value in extra_states.items():
        torch.save(value, tmp / f"extra-{key}.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **(state or {})}, indent=2))


def save_sharded(run_dir: str | Path, step: int, model: torch.nn.Module, optimizer: Any, scheduler: Any = None,
                 state: dict | None = None, keep: int = 2, extras: dict | None = None) -> Path:
    """`save` for a sharded model, called by every rank: each writes its shards of the model and
    optimizer state into a hidden temp folder; rank 0 adds the rest (its scheduler, RNG, extras:
    every rank calls their `state_dict()`, which gathers a sharded teacher's weights to rank 0),
    renames the folder into place and moves `latest`."""
    import torch.distributed as tdist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    base, name = ckpt_dir(run_dir), f"step-{step:08d}"
    final, tmp = base / name, base / f".{name}.tmp-sharded"
    rank = tdist.get_rank()
    if rank == 0:
        base.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    tdist.barrier()
    msd, osd = get_state_dict(model, optimizer)
    dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=tmp / SHARDED)  # returns once every rank wrote
    extra_states = {k: o.state_dict() for k, o in (extras or {}).items()}  # a sharded extra's is a collective
    if rank == 0:
        model.config.save_pretrained(tmp / "model")
        _rest(tmp, step, scheduler, state, extra_states)
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        shutil.rmtree(final, ignore_errors=True)  # a rerun of the same step replaces the old copy
        os.replace(tmp, final)
        fsync_dir(base)
        write_text(base / LATEST, name)
        _prune(base, keep, name)
    tdist.barrier()
    return final


def restore_sharded(path: str | Path, model: torch.nn.Module, optimizer: Any = None, scheduler: Any = None,
                    rng: bool = True, extras: dict | None = None) -> dict:
    """`restore` of a `save_sharded` checkpoint into a sharded model (every rank calls it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = Path(path)
    msd, osd = get_state_dict(model, optimizer)
    sd = {"model": msd, "optimizer": osd}
    dcp.load(sd, checkpoint_id=path / SHARDED)
    set_state_dict(model, optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optimizer"])
    return _restore_rest(path, scheduler, rng, extras)


def _prune(base: Path, keep: int, current: str) -> None:
    done = sorted(p for p in base.glob("step-*") if p.is_dir())
    for p in done[:-keep] if keep > 0 else []:
        if p.name != current:
            shutil.rmtree(p, ignore_errors=True)
    remove_leftovers(base)  # of killed writes


def prune(run_dir: str | Path) -> int:
    """Remove a finished run's checkpoints folder, once `run_dir/final` holds its model (a
    Hugging Face folder with config.json); returns the bytes freed (0 when there is no final
    model or no checkpoint). What a stage leaves by default: final/, metrics and curves."""
    base = ckpt_dir(run_dir)
    if not (Path(run_dir) / "final" / "config.json").exists() or not base.is_dir():
        return 0
    freed = sum(f.stat().st_size for f in base.rglob("*") if f.is_file())
    shutil.rmtree(base)
    return freed


def latest(run_dir: str | Path) -> Path | None:
    """The folder `latest` points at, or None when there is no complete checkpoint."""
    ptr = ckpt_dir(run_dir) / LATEST
    if not ptr.exists():
        return None
    path = ckpt_dir(run_dir) / ptr.read_text().strip()
    return path if (path / "state.json").exists() else None


def restore(path: str | Path, model: torch.nn.Module, optimizer: Any = None, scheduler: Any = None,
            rng: bool = True, extras: dict | None = None) -> dict:
    """Load a checkpoint into the given objects (and `extras`, by name, when saved); returns
    its state.json."""
    path = Path(path)
    model.load_state_dict(torch.load(path / "model.pt", map_location="cpu"))
    if optimizer is not None and (path / "optimizer.pt").exists():
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu"))
    return _restore_rest(path, scheduler, rng, extras)


def _restore_rest(path: Path, scheduler: Any, rng: bool, extras: dict | None) -> dict:
    if scheduler is not None and (path / "scheduler.pt").exists():
        scheduler.load_state_dict(torch.load(path / "scheduler.pt", map_location="cpu"))
    if rng:
        set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    for name, obj in (extras or {}).items():
        if (path / f"extra-{name}.pt").exists():
            obj.load_state_dict(torch.load(path / f"extra-{name}.pt", weights_only=False))
    return json.loads((path / "state.json").read_text())
