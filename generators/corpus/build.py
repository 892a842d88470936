"""Build the world corpus end to end: world -> documents -> checked questions -> shards.

`generate(cfg)` returns the `documents` and `triples` rows (plain dicts, schema content
fields plus a per-triple lineage) and counts; `write(cfg, root, dataset)` also commits them
with storage.write_rows and saves the resolved config at
`<root>/<dataset>/_runs/<run_id>.json`. Every question is re-derived from its golden
documents' text by `derive.check_triple` before it is kept (`verify`), so a kept triple is
answerable from its golden documents alone.

    from generators.corpus.build import WorldConfig, write
    write(WorldConfig(seed=7, entities=2000), "data", "world7")
    # or: forgeplay corpus world --seed 7 --entities 2000 --dataset world7
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from random import Random
from typing import Callable

from generators.corpus.derive import check_triple
from generators.corpus.ids import triple_id
from generators.corpus.inference import make_question
from generators.corpus.questions import QTYPES, Question, QuestionMaker
from generators.corpus.render import RenderedDoc, render_world
from generators.corpus.world import MIN_ENTITIES, World, build_world
from storage.runs import save_run
from storage.schema import canonical_json, record_id

GENERATOR_VERSION = 1
DEFAULT_MIX = {"bridge": 0.4, "comparison": 0.2, "compositional": 0.2, "inference": 0.2}
ATTEMPTS_PER_TRIPLE = 30

Progress = Callable[[str, int], None]  # (phase, items done since the last call)


@dataclass
class WorldConfig:
    seed: int = field(default=7, metadata={"help": "Random seed; the same seed gives the same corpus."})
    entities: int = field(default=2000, metadata={"help": f"Number of entities (documents), at least {MIN_ENTITIES}."})
    triples: int | None = field(default=None, metadata={
        "help": "Number of questions; default: half the number of entities."})
    qtypes: dict = field(default_factory=lambda: dict(DEFAULT_MIX), metadata={
        "help": "Share of each question type: bridge, comparison, compositional, inference."})
    verify: bool = field(default=True, metadata={
        "help": "Re-derive every answer from its golden documents' text and drop questions that fail."})

    def check(self) -> None:
        """ValueError on a size or mix the world cannot be built with, before anything runs."""
        if self.entities < MIN_ENTITIES:
            raise ValueError(f"need at least {MIN_ENTITIES} entities, got {self.entities}")
        normalise_mix(self.qtypes)

    def resolved(self) -> dict:
        """The config with defaults filled in and the mix normalised (what is saved)."""
        d = asdict(self)
        d["triples"] = self.triples if self.triples is not None else self.entities // 2
        d["qtypes"] = normalise_mix(self.qtypes)
        d["generator_version"] = GENERATOR_VERSION
        return d

    def config_hash(self) -> str:
        return hashlib.sha256(canonical_json(self.resolved()).encode()).hexdigest()[:16]

    @property
    def source(self) -> str:
        return f"world:seed={self.seed}"


def normalise_mix(mix: dict) -> dict:
    unknown = sorted(set(mix) - set(QTYPES))
    if unknown:
        raise ValueError(f"unknown question type(s) {', '.join(unknown)}; known: {', '.join(QTYPES)}")
    if any(not isinstance(v, (int, float)) or v < 0 for v in mix.values()):
        raise ValueError("question type shares must be numbers >= 0")
    total = sum(mix.values())
    if total <= 0:
        raise ValueError("question type shares must not all be 0")
    return {q: round(mix.get(q, 0) / total, 6) for q in QTYPES if mix.get(q, 0) > 0}


def parse_mix(text: str) -> dict:
    """"bridge=0.4,comparison=0.2" -> {"bridge": 0.4, "comparison": 0.2} (normalised)."""
    mix = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=SHARE, got {part!r}")
        try:
            mix[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"share of {name.strip()!r} is not a number: {value!r}") from None
    return normalise_mix(mix)


def allocate(total: int, mix: dict) -> dict:
    """Split `total` by shares with largest remainders (sums exactly to total)."""
    raw = {q: total * s for q, s in mix.items()}
    out = {q: int(v) for q, v in raw.items()}
    for q in sorted(raw, key=lambda q: (out[q] - raw[q], QTYPES.index(q)))[: total - sum(out.values())]:
        out[q] += 1
    return out


@dataclass
class Corpus:
    world: World
    docs: dict[str, RenderedDoc]
    document_rows: list[dict]
    triple_rows: list[dict]
    rejected: Counter
    config: dict


def document_row(doc: RenderedDoc, world: World, source: str) -> dict:
    e = world.by_id[doc.entity_id]
    meta = {"entity_id": e.id, "type": e.type, "subtype": e.subtype}
    return {"doc_id": doc.doc_id, "title": doc.title, "text": doc.text, "source": source,
            "meta": json.dumps(meta, sort_keys=True)}


def triple_row(q: Question, docs: dict[str, RenderedDoc], source: str) -> dict:
    golden = [docs[eid].doc_id for eid in q.golden]
    support = list(dict.fromkeys((docs[eid].doc_id, docs[eid].fact_sentence[rel]) for eid, rel in q.steps))
    meta = {"program": q.program, "entity_ids": q.golden, **q.extra}
    return {"triple_id": triple_id(source, q.question, q.answer), "question": q.question, "answer": q.answer,
            "aliases": q.aliases, "golden_doc_ids": golden,
            "supporting_facts": [{"doc_id": d, "sentence": s} for d, s in support],
            "hop_count": len(golden), "qtype": q.qtype, "source": source,
            "meta": json.dumps(meta, sort_keys=True)}


def generate(cfg: WorldConfig, progress: Progress | None = None) -> Corpus:
    resolved = cfg.resolved()
    tick = progress or (lambda phase, n: None)
    world = build_world(cfg.seed, cfg.entities)
    docs = render_world(world, progress=lambda n: tick("documents", n))
    doc_rows = [document_row(docs[e.id], world, cfg.source) for e in world.entities]
    row_ids = {r["doc_id"]: record_id(r) for r in doc_rows}
    by_doc_id = {d.doc_id: (d.title, d.text) for d in docs.values()}
    qm = QuestionMaker(world, Random(f"{cfg.seed}:questions"))
    targets = allocate(resolved["triples"], resolved["qtypes"])
    rows, seen, rejected, cache = [], set(), Counter(), {}
    lineage = {"model": None, "backend": None, "config_hash": cfg.config_hash()}
    for qtype in QTYPES:
        want, made = targets.get(qtype, 0), 0
        for _ in range(want * ATTEMPTS_PER_TRIPLE):
            if made >= want:
                break
            q = make_question(qm, qtype)
            if q is None:
                rejected[f"{qtype}: no valid draw"] += 1
                continue
            if q.question in seen:
                rejected[f"{qtype}: duplicate question"] += 1
                continue
            row = triple_row(q, docs, cfg.source)
            if cfg.verify:
                res = check_triple(row, by_doc_id, cache=cache)
                if not res.ok:
                    rejected[f"{qtype}: derivation failed"] += 1
                    continue
            seen.add(q.question)
            row["lineage"] = {**lineage, "parent_ids": [row_ids[d] for d in row["golden_doc_ids"]]}
            rows.append(row)
            made += 1
            tick("triples", 1)
        if made < want:
            rejected[f"{qtype}: short of target by"] += want - made
    return Corpus(world, docs, doc_rows, rows, rejected, resolved)


def write(cfg: WorldConfig, root, dataset: str, run_id: str | None = None,
          progress: Progress | None = None) -> tuple[Corpus, str, dict]:
    """Generate and commit the corpus; returns (corpus, run id, rows written per kind)."""
    from storage.shards import ShardWriter

    corpus = generate(cfg, progress)
    run_id = run_id or f"world-{cfg.config_hash()[:12]}"
    lineage = {"config_hash": cfg.config_hash(), "parent_ids": []}
    written = {}
    for kind, rows in (("documents", corpus.document_rows), ("triples", corpus.triple_rows)):
        with ShardWriter(root, dataset, kind, run_id, lineage=lineage) as w:
            written[kind] = 0
            for i in range(0, len(rows), 10_000):
                written[kind] += w.write(rows[i:i + 10_000])
                if progress:
                    progress("write", len(rows[i:i + 10_000]))
    save_run(root, dataset, run_id,
             {"command": "corpus world", "run_id": run_id, "dataset": dataset, "source": cfg.source,
              "config": corpus.config, "config_hash": cfg.config_hash(),
              "rows": {"documents": len(corpus.document_rows), "triples": len(corpus.triple_rows)},
              "rejected": dict(corpus.rejected)})
    return corpus, run_id, written
