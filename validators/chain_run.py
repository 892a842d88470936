"""`forgeplay corpus questions`: multi-hop triples built from a corpus's documents alone.

Chains of passages (generators/corpus/chains.py) are taken in a seeded order, a chunk at a
time; the model writes each chain's question from its question construction path, hop by hop
or at once (`--author`: validators/chain_authors.py, prompts in
generators/corpus/chain_prompts.py), every candidate is checked (validators/chain_checks.py),
and the chunk commits: the kept candidates as `triples` rows of the dataset (golden docs in
hop order, one supporting sentence per hop, qtype bridge, meta with the QCP and the links),
then one `verdicts` row per candidate (record_id = the chain's id, kind triples; a reject
says why and keeps the question and answer in its detail). So `synthesize`, `selfplay`,
evaluation and the exports read the kept triples like imported ones.

Resume: the run id is a hash of the options and the backend (`questions-<hash>`); a rerun
skips the chains with committed verdicts and the writer skips triples it has, so nothing
is written twice, and a kill between a chunk's two commits only redoes that chunk.

    report = run_questions(QuestionsConfig(dataset="mydocs", max_chains=100), BackendConfig(), root)
    report["funnel"]   # {"chains": 100, "kept": 12, "answer_in_question": 30, ...}
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Callable

from generators.corpus.chains import LINKS, ChainFinder, load_passages
from generators.corpus.ids import triple_id
from generators.llm.registry import BackendConfig, check_backend, make_backend
from storage.reader import require_rows
from storage.resumable import RunWriter
from storage.runs import config_hash, save_run, without_later_defaults
from validators.chain_authors import AUTHORS
from validators.chain_checks import Candidate, verify


@dataclass
class QuestionsConfig:
    """Options of `forgeplay corpus questions` (every field is a CLI option)."""

    dataset: str = field(default="", metadata={"required": True, "help": "dataset whose documents the questions are built from; the kept triples are written to it"})
    max_chains: int = field(default=200, metadata={"help": "chains of passages to write questions for, at most"})
    hops: str = field(default="2,3", metadata={"help": "chain lengths in passages, comma-separated (2 and/or 3)"})
    links: str = field(default="title,name,column", metadata={"help": "how one passage leads to the next, comma-separated: title (it mentions the next one's title), name (both mention a frequent capitalised name), column (the documents' own `links` in meta), retriever (BM25 neighbours: a passage that does not name the next one, so only --author path can write their questions)"})
    per_start: int = field(default=2, metadata={"help": "chains of each length from one start passage, at most"})
    top_k: int = field(default=5, metadata={"help": "passages the retriever gives the shortcut check (the chain's own left out)"})
    min_f1: float = field(default=0.5, metadata={"help": "token F1 from which a reader's reply counts as the answer"})
    author: str = field(default="hops", metadata={"choices": tuple(AUTHORS), "help": "how the model writes a question: hops (a question about the last passage's answer and a phrase per link, put together by the program: within a small model's reach) or path (the whole question from the chain's question construction path at once: for a model that can)"})
    samples: int = field(default=4, metadata={"help": "hops: replies asked per part (the greedy one, then sampled ones), the first that links is taken"})
    max_tokens: int = field(default=64, metadata={"help": "tokens the model may write per question"})
    seed: int = field(default=0, metadata={"help": "seed of the order of start passages and of the answer picks"})
    chunk: int = field(default=32, metadata={"help": "chains per model batch and commit"})
    run_id: str | None = field(default=None, metadata={"help": "run id (default: questions-<hash of the options>)"})

    def hop_list(self) -> tuple[int, ...]:
        try:
            hops = tuple(sorted({int(h) for h in self.hops.split(",") if h.strip()}))
        except ValueError:
            raise ValueError(f"--hops is chain lengths separated by commas, e.g. 2,3; got {self.hops!r}") from None
        if not hops or any(h not in (2, 3) for h in hops):
            raise ValueError(f"--hops takes 2 and/or 3, got {self.hops!r}")
        return hops

    def link_list(self) -> tuple[str, ...]:
        links = tuple(x.strip() for x in self.links.split(",") if x.strip())
        bad = [x for x in links if x not in LINKS]
        if not links or bad:
            raise ValueError(f"--links takes {', '.join(LINKS)}, comma-separated; got {self.links!r}")
        return links


def check_inputs(cfg: QuestionsConfig, bcfg: BackendConfig | None, root) -> None:
    """Every option and what it names, before any model loads (one-line ValueError)."""
    if not cfg.dataset:
        raise ValueError("--dataset is required (a dataset with documents: forgeplay corpus import ...)")
    for name in ("max_chains", "per_start", "top_k", "chunk", "max_tokens", "samples"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    cfg.hop_list(), cfg.link_list()
    if cfg.author not in AUTHORS:
        raise ValueError(f"--author takes {' or '.join(AUTHORS)}, got {cfg.author!r}")
    require_rows(root, cfg.dataset, "documents")
    if bcfg is not None:
        check_backend(bcfg)


def run_id_of(cfg: QuestionsConfig, bcfg: BackendConfig, backend_name: str) -> tuple[str, str]:
    fields = without_later_defaults(asdict(cfg), {"author": "path"})  # runs made before --author keep their ids
    if cfg.author == "path":
        fields.pop("samples")  # (which only hops reads)
    h = config_hash({**fields, "chunk": None, "run_id": None, "backend": bcfg.config_hash(),
                     "backend_name": backend_name}, length=16)
    return cfg.run_id or f"questions-{h[:12]}", h


def triple_row(c: Candidate, dataset: str, model: str) -> dict:
    chain = c.chain
    source = f"questions:{dataset}"
    facts = list({(d, s): {"doc_id": d, "sentence": s} for d, s in zip(chain.doc_ids, chain.sentences)}.values())
    meta = {"format": "corpus-questions", "chain_id": chain.chain_id, "qcp": chain.qcp.to_json(), "model": model,
            "links": [{"name": n, "via": v} for n, v in zip(chain.names, chain.vias)]}
    return {"triple_id": triple_id(source, c.question, c.answer, *chain.doc_ids), "question": c.question,
            "answer": c.answer, "aliases": [], "golden_doc_ids": chain.doc_ids, "supporting_facts": facts,
            "hop_count": len(chain.passages), "qtype": "bridge", "source": source,
            "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False)}


def run_questions(cfg: QuestionsConfig, bcfg: BackendConfig, root, progress: Callable[[int], None] | None = None,
                  backend=None) -> dict:
    """Build, check and commit (module docstring); returns the run's report with its funnel.
    `backend`: a ready backend to use instead of making one from `bcfg`."""
    check_inputs(cfg, None if backend is not None else bcfg, root)
    name = (backend.name or bcfg.backend) if backend is not None else bcfg.backend
    run_id, h = run_id_of(cfg, bcfg, name)
    writer = RunWriter(root, run_id, lineage={"backend": name, "config_hash": h, "model": bcfg.model})
    done = set(writer.committed(cfg.dataset, "verdicts", "record_id").to_pylist())
    finder = ChainFinder(load_passages(root, cfg.dataset), cfg.link_list())
    if backend is None:
        backend = make_backend(bcfg)
    model = str(backend.model or name)
    funnel: Counter = Counter()
    chains = islice(finder.chains(cfg.seed, cfg.hop_list(), cfg.per_start), cfg.max_chains)
    written = Counter()
    while True:
        batch = list(islice(chains, cfg.chunk))
        if not batch:
            break
        funnel["chains"] += len(batch)
        todo = [c for c in batch if c.chain_id not in done]
        funnel["done before"] += len(batch) - len(todo)
        if todo:
            cands: list[Candidate] = AUTHORS[cfg.author](todo, backend, cfg.max_tokens, cfg.samples)
            verdicts = verify(cands, finder, backend, cfg.top_k, cfg.min_f1)
            kept = [triple_row(c, cfg.dataset, model) for c, v in zip(cands, verdicts) if v.passed]
            for c, v in zip(cands, verdicts):
                funnel["kept" if v.passed else v.reason] += 1
                funnel[f"{len(c.chain.passages)} hops {'kept' if v.passed else 'rejected'}"] += 1
            if kept:
                written["triples"] += writer.commit(cfg.dataset, "triples", kept)
            rows = [v.row(c.chain.chain_id, "triples") for c, v in zip(cands, verdicts)]
            written["verdicts"] += writer.commit(cfg.dataset, "verdicts", rows)
        if progress:
            progress(len(batch))
    funnel["no answer span"] = finder.no_answer
    report = {"command": "corpus questions", "run_id": run_id, "dataset": cfg.dataset, "config": asdict(cfg),
              "backend": asdict(bcfg) | {"api_key": None}, "config_hash": h, "passages": len(finder.passages),
              "funnel": dict(funnel), "written": dict(written)}
    save_run(root, cfg.dataset, run_id, report)
    return report
