"""Where bought labels come from. A source is a small class: a `name`, a `cost` per label
and `buy(prompt_ids) -> {prompt_id: label}`; a prompt it cannot label is left out (its
reservation is released, nothing spent). `SOURCES` maps the `--source` names to the classes,
each built for a run by `from_config(cfg, root, prompts, ledger)` (`make_source`):

- `column`: the held-back answer column (world or imported data), revealed only when bought.
- `queue`: the human workflow. Buying writes the prompts to a queue file for people to fill
  in (`<out>/_queue/<strategy>-<hash>.csv` or `.parquet`: prompt_id, question, label) and
  records them in the ledger (`Ledger.enqueue`); it returns no label (`defers`: counted as
  queued), so nothing is spent until `forgeplay labels ingest` buys the filled-in file
  (acquire/ingest.py), whose rows carry source `queue` (`FilledQueue`).
- `llm`: a stronger model as annotator, through any backend (generators.llm.registry): it
  answers each question in `<answer>...</answer>`; a reply without one is left out. A label
  costs `--label-cost`; the annotator, its model and the reply's tokens go into the label's
  meta (`notes`).

    source = make_source(cfg, root, prompts, ledger)
    counts = buy(ledger, source, ids, writer, out, strategy)    # acquire/buy.py
    source.close()
"""

from __future__ import annotations

import csv
import hashlib

from generators.llm.base import BackendError, ChatRequest
from generators.llm.toolcalls import final_answer
from train.labelled import QUEUE_FORMATS

QUEUE_COLUMNS = ("prompt_id", "question", "label")
ANNOTATOR_SYSTEM = ("You label questions with their correct answer. Reply with the answer only, inside "
                    "<answer>...</answer>, for example <answer>Paris</answer>.")


class Source:
    """The shape every source has (module docstring); subclasses set `name` and `buy`."""

    name = ""
    cost = 1.0
    defers = False  # True: a prompt left out is handed on (queued), not failed

    def buy(self, prompt_ids: list[str]) -> dict[str, str]:
        raise NotImplementedError

    def notes(self, prompt_id: str) -> dict:
        """Extra facts about a bought label, kept in its row's meta."""
        return {}

    def summary(self) -> dict:
        """What the source did in this run (shown by the command line)."""
        return {"name": self.name}

    def close(self) -> None:
        pass


class ColumnSource(Source):
    """Labels held back in a column (world or imported data): revealed only when bought."""

    name = "column"

    def __init__(self, answers: dict[str, str], cost: float = 1.0) -> None:
        self.answers, self.cost, self.revealed = answers, cost, 0

    @classmethod
    def from_config(cls, cfg, root, prompts, ledger) -> "ColumnSource":
        return cls({p.prompt_id: p.answer for p in prompts}, cfg.label_cost)

    def buy(self, prompt_ids: list[str]) -> dict[str, str]:
        out = {p: self.answers[p] for p in prompt_ids if p in self.answers}
        self.revealed += len(out)
        return out

    def summary(self) -> dict:
        return {"name": self.name, "revealed": self.revealed}


class FilledQueue(ColumnSource):
    """The labels people wrote into a queue file, bought by `forgeplay labels ingest`."""

    name = "queue"


class QueueSource(Source):
    """Hands the prompts to people: a queue file per call, recorded in the ledger (module docstring)."""

    name = "queue"
    defers = True

    def __init__(self, folder, questions: dict[str, str], ledger, cost: float = 1.0, strategy: str = "",
                 fmt: str = "csv") -> None:
        if fmt not in QUEUE_FORMATS:
            raise ValueError(f"the queue format must be one of {', '.join(QUEUE_FORMATS)}, not {fmt!r}")
        self.folder, self.questions, self.ledger = folder, questions, ledger
        self.cost, self.strategy, self.fmt = cost, strategy, fmt
        self.files: list[str] = []
        self.queued = 0

    @classmethod
    def from_config(cls, cfg, root, prompts, ledger) -> "QueueSource":
        from storage.manifest import dataset_dir

        return cls(dataset_dir(root, cfg.labels_dataset()) / "_queue", {p.prompt_id: p.question for p in prompts},
                   ledger, cfg.label_cost, cfg.label_strategy(), cfg.queue_format)

    def buy(self, prompt_ids: list[str]) -> dict[str, str]:
        known = self.ledger.queued()
        new = [p for p in prompt_ids if p not in known]
        self.queued += len(prompt_ids)
        if new:
            path = self.folder / f"{self.strategy or 'queue'}-{_digest(new)}.{self.fmt}"
            self.ledger.enqueue(new, self.cost, self.strategy, path.name)  # first: a file names only known ids
            write_queue(path, [{"prompt_id": p, "question": self.questions.get(p, ""), "label": None} for p in new])
            self.files.append(str(path))
        return {}

    def summary(self) -> dict:
        return {"name": self.name, "queued": self.queued, "files": self.files}


class LLMSource(Source):
    """An annotator model answers the questions (module docstring)."""

    name = "llm"

    def __init__(self, backend, questions: dict[str, str], cost: float = 1.0, max_tokens: int = 64) -> None:
        self.backend, self.questions, self.cost, self.max_tokens = backend, questions, cost, max_tokens
        self.replies: dict[str, dict] = {}
        self.answered = self.no_answer = self.failed = 0

    @classmethod
    def from_config(cls, cfg, root, prompts, ledger) -> "LLMSource":
        from generators.llm.registry import BackendConfig, make_backend

        backend = make_backend(BackendConfig(backend=cfg.annotator_backend, model=cfg.annotator_model,
                                             base_url=cfg.annotator_url))
        return cls(backend, {p.prompt_id: p.question for p in prompts}, cfg.label_cost, cfg.annotator_max_tokens)

    def _request(self, prompt_id: str) -> ChatRequest:
        return ChatRequest(messages=[{"role": "system", "content": ANNOTATOR_SYSTEM},
                                     {"role": "user", "content": self.questions[prompt_id]}],
                           n=1, temperature=0.0, max_tokens=self.max_tokens)

    def buy(self, prompt_ids: list[str]) -> dict[str, str]:
        asked = [p for p in prompt_ids if p in self.questions]
        try:
            outs = self.backend.generate([self._request(p) for p in asked])
        except BackendError:  # one bad request fails the call: ask one by one, leave out what fails
            outs = []
            for p in asked:
                try:
                    outs.append(self.backend.generate([self._request(p)])[0])
                except BackendError:
                    outs.append(None)
            if asked and all(o is None for o in outs):
                raise
        got = {}
        for p, out in zip(asked, outs):
            if out is None:
                self.failed += 1
                continue
            c = out[0]
            answer = final_answer([{"role": "assistant", "content": c.text}])
            if answer is None:
                self.no_answer += 1
                continue
            got[p] = answer
            self.replies[p] = {"annotator": self.backend.name, "model": str(self.backend.model),
                               "prompt_tokens": c.prompt_tokens,
                               "completion_tokens": c.completion_tokens or len(c.token_ids)}
        self.answered += len(got)
        return got

    def notes(self, prompt_id: str) -> dict:
        return self.replies.get(prompt_id, {})

    def summary(self) -> dict:
        return {"name": self.name, "answered": self.answered, "no_answer": self.no_answer, "failed": self.failed}

    def close(self) -> None:
        self.backend.close()


SOURCES: dict[str, type] = {"column": ColumnSource, "queue": QueueSource, "llm": LLMSource}


def make_source(cfg, root, prompts, ledger) -> Source:
    """The `cfg.source` source for a run over `prompts` (acquire.session.Prompted)."""
    if cfg.source not in SOURCES:
        raise ValueError(f"unknown --source {cfg.source!r}: choose one of {', '.join(SOURCES)}")
    return SOURCES[cfg.source].from_config(cfg, root, prompts, ledger)


def _digest(prompt_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(prompt_ids)).encode()).hexdigest()[:10]


def write_queue(path, rows: list[dict]) -> None:
    """Queue rows (prompt_id, question, label) to `path` (.csv or .parquet), atomically."""
    from storage.files import atomic_path

    with atomic_path(path) as tmp:
        if str(path).endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            cols = {c: pa.array([r[c] for r in rows], pa.string()) for c in QUEUE_COLUMNS}
            pq.write_table(pa.table(cols), tmp)
        else:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(QUEUE_COLUMNS)
                w.writerows([[r[c] or "" for c in QUEUE_COLUMNS] for r in rows])
