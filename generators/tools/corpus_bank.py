"""Tools that fit an imported corpus: the general search plus one search per kind of document
the corpus shows, instead of the built-in world's domains (`synthesize --tools corpus`).

Kinds come from the documents' own `kind`/`category` (documents.meta, as `corpus import`
stores it; also `entity_type`/`type`), else from clusters of the passages: TF-IDF vectors
of (at most SAMPLE, seed-chosen) passages, spherical k-means with k-means++ seeding (numpy,
deterministic for a seed); a cluster keeps its centroid's top terms less the mean of all
centroids (`terms`, which assign every passage) and is named from its most telling words
(those in the largest share of its passages less the share of the others'). A kind with fewer than MIN_PASSAGES passages
gets no tool of its own (the general search finds those). Each kind's tool is a `tools` row:

    domain  the kind ("river") or the cluster's words ("harbour_chronicle")
    name    search_<domain> (search_<domain>_pages when a base tool has that name)
    meta    {"source": "corpus", "kinds": [the documents' kinds it searches], "words": [...],
             "passages": n} and, for a cluster, "terms": {word: weight} (its top terms)

A kind tool's search sees the passages of its kinds (and those of no kind); a cluster tool's
those whose distinct words weigh most in its `terms` (`assignments`, the one assignment the
simulator and the planner both use, so validation's replay finds the same passages; the
clusters of one bank share a `bank` key, so banks of other seeds in the same dataset do
not change each other's searches).

    rows = corpus_bank(documents)             # [general_search row, search_river, search_city, ...]

Commands cluster with the default seed (0), so every run of a dataset offers the same corpus
tools (a tool name means one tool in a dataset, and validation replays all its runs with one
simulator); another seed gives another, equally deterministic, clustering.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np

from generators.tools.base import DOMAINS, ENTITY_TYPE_ALIASES, GENERAL, TOP_K, base_rows, make_row
from generators.tools.compute import COMPUTE
from generators.tools.retrieval import TOKEN_PATTERN
from storage.schema import meta_dict

SOURCE = "corpus"
MIN_PASSAGES = 2
MAX_KINDS = 12
SAMPLE = 3000  # passages a clustering is fitted on
TERMS = 40  # top terms a cluster keeps to assign passages
_STOP: frozenset[str] | None = None


def tokens_of(text: str) -> list[str]:
    """The words of a text as the bank's clusters count them (bm25s's token pattern and English
    stopwords, no numbers, no words shorter than 3 letters)."""
    global _STOP
    if _STOP is None:
        from bm25s.tokenization import _infer_stopwords

        _STOP = frozenset(_infer_stopwords("en"))
    return [t for t in TOKEN_PATTERN.findall(text.lower()) if len(t) > 2 and t not in _STOP and not t.isdigit()]


def kind_of(meta: Any) -> str | None:
    """A document's kind from its meta (`kind`, `category`, `entity_type` or `type`), lower case,
    the world's aliases applied (people -> person); None when it has none."""
    meta = meta_dict(meta)
    t = meta.get("entity_type") or meta.get("type") or meta.get("kind") or meta.get("category")
    if not isinstance(t, str) or not t.strip():
        return None
    t = t.strip().lower()
    return ENTITY_TYPE_ALIASES.get(t, t)


def is_corpus_tool(row: dict) -> bool:
    return meta_dict(row.get("meta")).get("source") == SOURCE


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40].strip("_")
    return s if s and s[0].isalpha() else f"kind_{s}" if s else "kind"


def _tfidf(token_lists: list[list[str]], vocab_size: int = 4000) -> tuple[np.ndarray, list[str]]:
    """L2-normalised TF-IDF rows (sublinear tf) over words in at least 2 and at most half the texts."""
    n = len(token_lists)
    df = Counter(t for toks in token_lists for t in set(toks))
    vocab = sorted((t for t, c in df.items() if 2 <= c <= max(2, n // 2)), key=lambda t: (-df[t], t))[:vocab_size]
    col = {t: j for j, t in enumerate(vocab)}
    x = np.zeros((n, len(vocab)), dtype=np.float32)
    for i, toks in enumerate(token_lists):
        for t, c in Counter(toks).items():
            if t in col:
                x[i, col[t]] = (1 + math.log(c)) * math.log(n / df[t])
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1), vocab


def kmeans(x: np.ndarray, k: int, seed: int, iters: int = 30) -> np.ndarray:
    """Spherical k-means (cosine) with k-means++ seeding: the centroids, deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    centroids = [x[rng.integers(len(x))]]
    for _ in range(1, k):
        d = 1 - np.max(x @ np.stack(centroids).T, axis=1)
        d = np.clip(d, 0, None) ** 2
        centroids.append(x[rng.choice(len(x), p=d / d.sum())] if d.sum() > 0 else x[rng.integers(len(x))])
    c = np.stack(centroids)
    for _ in range(iters):
        labels = np.argmax(x @ c.T, axis=1)
        new = np.stack([x[labels == j].sum(axis=0) if np.any(labels == j) else c[j] for j in range(k)])
        new /= np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-12)
        if np.allclose(new, c):
            break
        c = new
    return c


def _parameters(example: str) -> dict:
    return {"type": "object", "properties": {
        "query": {"type": "string", "minLength": 1, "description": f"What to search for, e.g. '{example}'"},
        "top_k": dict(TOP_K)}, "required": ["query"], "additionalProperties": False}


def _row(domain: str, what: str, words: list[str], titles: list[str], n: int, taken: set[str], meta: dict) -> dict:
    name = f"search_{domain}"
    if name in taken:
        name = f"search_{domain}_pages"
    taken.add(name)
    desc = (f"Search the corpus's {what} and return the best matching passages, "
            f"e.g. on {' or '.join(repr(t) for t in titles[:2])}.")
    return make_row(domain, name, desc, _parameters(titles[0] if titles else words[0] if words else domain), None,
                    {"source": SOURCE, "words": words[:8], "passages": n, **meta})


def _kind_domain(kind: str) -> str:
    """The domain of a kind's tool: the kind's slug, unless a built-in domain has that name (a
    corpus kind searches only its own passages, which a built-in domain's tool does not)."""
    slug = _slug(kind)
    return f"{slug}_pages" if slug in (*DOMAINS, COMPUTE) else slug


def corpus_bank(documents: Iterable[dict], seed: int = 0, max_kinds: int = MAX_KINDS) -> list[dict]:
    """The general search, then one tool per kind (or cluster) of `documents`, most passages first
    (at most `max_kinds`)."""
    docs = sorted(documents, key=lambda d: str(d["doc_id"]))
    texts = [f"{d.get('title') or ''}\n{d.get('text') or ''}" for d in docs]
    kinds = [kind_of(d.get("meta")) for d in docs]
    general = next(r for r in base_rows() if r["domain"] == GENERAL)
    taken = {r["name"] for r in base_rows()}
    rows = [general]
    counts = Counter(k for k in kinds if k)
    if counts:
        groups: dict[str, list[str]] = {}
        for k in sorted(counts, key=lambda k: (-counts[k], k)):
            if counts[k] >= MIN_PASSAGES:
                groups.setdefault(_kind_domain(k), []).append(k)
        sample = _sample(len(docs), seed)
        x, vocab = _tfidf([tokens_of(texts[i]) for i in sample])
        mean = x.mean(axis=0) if len(x) else None
        for domain, ks in list(groups.items())[:max_kinds]:
            idx = [i for i, k in enumerate(kinds) if k in ks]
            rows_in = [r for r, i in enumerate(sample) if kinds[i] in ks]
            words = []
            if len(vocab) and rows_in:
                lift = x[rows_in].mean(axis=0) - mean
                words = [vocab[j] for j in np.argsort(-lift, kind="stable")[:8] if lift[j] > 0]
            what = "pages of kind " + " or ".join(repr(k) for k in ks) + (f" (about {', '.join(words[:5])})" if words else "")
            rows.append(_row(domain, what, words, [docs[i].get("title") or "" for i in idx], len(idx), taken,
                             {"kinds": ks}))
        return rows
    return rows + _cluster_rows(docs, texts, seed, max_kinds, taken)


def _sample(n: int, seed: int) -> list[int]:
    """At most SAMPLE of n indices, chosen by `seed`, in order."""
    if n <= SAMPLE:
        return list(range(n))
    return sorted(np.random.default_rng(seed).choice(n, size=SAMPLE, replace=False).tolist())


def _cluster_rows(docs, texts, seed, max_kinds, taken) -> list[dict]:
    n = len(docs)
    k = min(max_kinds, round(math.sqrt(n / 2)))
    if k < 2:
        return []
    sample = _sample(n, seed)
    x, vocab = _tfidf([tokens_of(texts[i]) for i in sample])
    if not vocab:
        return []
    c = kmeans(x, k, seed)
    lift = c - c.mean(axis=0)
    out, used = [], set()
    terms_of = []
    for j in range(k):
        top = [t for t in np.argsort(-lift[j], kind="stable")[:TERMS] if lift[j, t] > 0]
        terms_of.append({vocab[t]: round(float(lift[j, t]), 4) for t in top})
    domains = domains_of([{"domain": str(j), "meta": {"source": SOURCE, "terms": terms_of[j]}} for j in range(k)],
                         [None] * n, lambda i: tokens_of(texts[i]))
    sizes = Counter(domains)
    present = x > 0
    labels = [domains[i] for i in sample]
    for j in sorted(range(k), key=lambda j: (-sizes[str(j)], j)):
        inside = np.array([lab == str(j) for lab in labels])
        if sizes[str(j)] < MIN_PASSAGES or not terms_of[j] or not inside.any():
            continue
        # its most telling words: in many of its passages and few of the others' (3 letters or more)
        contrast = present[inside].mean(axis=0) - (present[~inside].mean(axis=0) if (~inside).any() else 0)
        words = [vocab[t] for t in np.argsort(-contrast, kind="stable") if contrast[t] > 0 and len(vocab[t]) > 2][:8]
        if not words:
            continue
        name = "_".join(words[:2])
        domain = _slug(name if name not in used else "_".join(words[:3]))
        if domain in (*DOMAINS, COMPUTE) or domain in used:
            domain = f"{domain}_{j}"
        used.add(domain)
        titles = [docs[i].get("title") or "" for i, d in enumerate(domains) if d == str(j)]
        out.append(_row(domain, "pages about " + ", ".join(words[:5]), words, titles, sizes[str(j)], taken,
                        {"terms": terms_of[j]}))
    key = stable_key([[r["domain"], _meta(r)["terms"]] for r in out])
    return [{**r, "meta": json.dumps({**_meta(r), "bank": key}, sort_keys=True, ensure_ascii=False)} for r in out]


def stable_key(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def _meta(row: dict) -> dict:
    m = row.get("meta")
    return json.loads(m) if isinstance(m, str) else dict(m or {})


def bank_of(row: dict) -> str:
    """Which assignment a corpus tool's search follows: "kinds" (the documents' own kinds) or
    its cluster bank's key (banks clustered with other seeds assign passages apart)."""
    meta = _meta(row)
    return "kinds" if meta.get("kinds") else str(meta.get("bank", "clusters"))


def assignments(tools: Sequence[dict], kinds: Sequence[str | None], token_lists) -> dict[str, list[str | None]]:
    """{bank_of: the domain of each document in it (None: none of its tools')}, documents in the
    order of `kinds` (their kinds, `kind_of`) and `token_lists` (their tokens, read only for
    a cluster bank: a callable i -> tokens or a list). A cluster bank puts a document in the
    cluster whose `terms` its distinct words weigh most in (none when they weigh nothing)."""
    by_kind: dict[str, str] = {}
    clusters: dict[str, list[tuple[str, dict]]] = {}
    for row in tools:
        meta = _meta(row)
        if meta.get("source") != SOURCE:
            continue
        for k in meta.get("kinds") or []:
            by_kind.setdefault(k, row["domain"])
        if meta.get("terms"):
            clusters.setdefault(bank_of(row), []).append((row["domain"], meta["terms"]))
    out: dict[str, list[str | None]] = {}
    if by_kind:
        out["kinds"] = [by_kind.get(k) if k else None for k in kinds]
    tokens = token_lists if callable(token_lists) else token_lists.__getitem__
    for bank, cs in sorted(clusters.items()):
        cs = sorted(set((d, json.dumps(t, sort_keys=True)) for d, t in cs))
        cs = [(d, json.loads(t)) for d, t in cs]
        got: list[str | None] = []
        for i in range(len(kinds)):
            toks = set(tokens(i))
            scores = [sum(w for t, w in terms.items() if t in toks) for _, terms in cs]
            best = max(range(len(cs)), key=lambda j: (scores[j], -j))
            got.append(cs[best][0] if scores[best] > 0 else None)
        out[bank] = got
    return out


def domains_of(tools: Sequence[dict], kinds: Sequence[str | None], token_lists) -> list[str | None]:
    """The corpus tool's domain of each document: its kind's tool's, else its cluster's (the
    first bank's, in `assignments` order; None: none)."""
    banks = assignments(tools, kinds, token_lists)
    out: list[str | None] = [None] * len(kinds)
    for got in banks.values():
        out = [a or b for a, b in zip(out, got)]
    return out
