"""A small whole-loop run built with the real writers, model-free: a world corpus, template
trajectories (a few with a tool result replaced, so the rules layer rejects them), a
validation run of the schema, rules and dedup layers, self-play tasks and student attempts
with known exact matches, labels bought through the ledger, metrics.jsonl of two training
runs, and the run.json that names them. The models' outputs are the faked boundary."""

from __future__ import annotations

import json

import pytest

from tests.generators.conftest import embedded_tokenizer_dir  # noqa: F401  (the report's --tokenizer)

RUN = "run-test"
BROKEN = 4  # trajectories whose first tool result is replaced
# (iteration, hop count) -> exact match of each student attempt, two tasks of two attempts each
ATTEMPTS = {(0, 1): [1, 1, 0, 1], (0, 2): [0, 0, 1, 0], (1, 1): [1, 1, 1, 1], (1, 2): [1, 0, 1, 0]}
BOUGHT = {"random": 3, "care": 2}


def _trajectories(root):
    from generators.corpus.build import WorldConfig, write
    from generators.synth.synthesize import Session, SynthConfig, load_inputs
    from generators.tools.base import base_rows
    from storage import write_rows

    write(WorldConfig(seed=5, entities=200), root, "demo")
    bank = base_rows()  # the seven base tools: no variant gating, which loads an embedding model
    session = Session(load_inputs(root, "demo"), SynthConfig(dataset="demo", n=30, texts="template"), bank)
    rows, _ = session.trajectories(session.plans(), None, "synth-t")
    for r in rows[:BROKEN]:
        next(m for m in r["messages"] if m["role"] == "tool")["content"] = "nothing relevant was found"
    write_rows(root, "demo", "tools", "synth-t", bank)
    write_rows(root, "demo", "trajectories", "synth-t", rows)
    return rows


def _validate(root) -> dict:
    from generators.llm.registry import BackendConfig
    from validators.run import ValidationRun
    from validators.validator import ValidateConfig, check_chunk

    run = ValidationRun(ValidateConfig(dataset="demo", layers="schema,rules,dedup"), BackendConfig(), str(root))
    for chunk in run.chunks():
        run.commit(run.finish(chunk, check_chunk(chunk.todo, *run.task_args)))
    return run.close()


def _selfplay(root) -> None:
    from storage.resumable import RunWriter

    for it in (0, 1):
        tasks, attempts = [], []
        for hops in (1, 2):
            ems = ATTEMPTS[(it, hops)]
            for t in range(2):
                tid = f"task-{it}-{hops}-{t}"
                qcp = {"seed_doc_id": None, "hops": [{"query": "q", "doc_ids": ["d"], "note": ""}] * hops}
                tasks.append({"task_id": tid, "question": f"question {tid}?", "answer": "a", "qcp": qcp,
                              "hop_count": hops, "examiner_step": it})
                for a in range(2):
                    em = ems[2 * t + a]
                    attempts.append({"rollout_id": f"{tid}-{a}", "prompt_id": tid, "policy_version": it,
                                     "messages": [{"role": "user", "content": "q"}], "answer": "a" if em else "b",
                                     "reward": float(em), "num_tokens": 3,
                                     "meta": json.dumps({"role": "student", "em": float(em), "iteration": it})})
        RunWriter(root, f"sp-it{it}-examine").commit("demo_selfplay", "tasks", tasks)
        RunWriter(root, f"sp-it{it}-attempt").commit("demo_selfplay", "rollouts", attempts)


def _labels(root) -> None:
    from acquire.buy import buy
    from acquire.ledger import Ledger
    from acquire.sources import ColumnSource
    from storage.manifest import dataset_dir
    from storage.resumable import RunWriter

    ledger = Ledger(dataset_dir(root, "demo_labels") / "_ledger.sqlite", budget=10)
    start = 0
    for strategy, n in BOUGHT.items():
        ids = [f"p{i}" for i in range(start, start + n)]
        start += n
        buy(ledger, ColumnSource({p: "yes" for p in ids}, cost=1.5), ids, RunWriter(root, f"acq-{strategy}"),
            "demo_labels", strategy)


def _metrics(folder, keys) -> str:
    folder.mkdir(parents=True)
    lines = [json.dumps({"step": s, **{k: 2.0 / s + (0.1 if k == "reward" else 0) for k in keys}}) for s in range(1, 6)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder)


@pytest.fixture(scope="session")
def loop_run(tmp_path_factory):
    """(data root, run record) of a finished loop run over real small datasets."""
    from storage import verify
    from storage.files import write_json
    from storage.manifest import datasets

    root = tmp_path_factory.mktemp("report-data")
    _trajectories(root)
    validated = _validate(root)
    _selfplay(root)
    _labels(root)
    evals = {stage: {"em": em, "f1": em + 0.1, "answered": 0.9, "well_formed": 0.95, "rollouts": 8,
                     "by_qtype": {"bridge": {"rollouts": 4, "em": em / 2, "f1": 0.2, "answered": 0.9, "well_formed": 1.0},
                                  "comparison": {"rollouts": 4, "em": em, "f1": 0.3, "answered": 0.8, "well_formed": 0.9}}}
             for stage, em in (("base", 0.125), ("sft", 0.25), ("grpo", 0.5))}
    record = {
        "run_id": RUN, "config": {"dataset": "demo"}, "status": "done",
        "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T01:00:00+00:00",
        "datasets": {"world": "demo", "accepted": validated["accepted_dataset"], "selfplay": "demo_selfplay",
                     "labels": "demo_labels"},
        "stages": {"corpus": {"status": "done", "seconds": 1.5, "rows_out": 100, "notes": "200 documents"},
                   "synthesize": {"status": "done", "seconds": 2.0, "rows_in": 100, "rows_out": 30,
                                  "summary": {"run_id": "synth-t"}},
                   "validate": {"status": "done", "seconds": 3.0, "rows_in": validated["rows_in"],
                                "rows_out": validated["rows_out"], "summary": validated},
                   "selfplay": {"status": "done", "seconds": 4.0, "summary": {"run_id": "sp"}}},
        "models": {"base": "SmolLM2-135M-Instruct"},
        "train_runs": {"sft": _metrics(root / "train" / "sft", ["loss"]),
                       "grpo": _metrics(root / "train" / "grpo", ["loss", "reward"])},
        "eval": evals,
        "shards": {"checked": verify(root)[0], "datasets": {ds: verify(root, ds)[0] for ds in datasets(root)},
                   "quarantined": []},
    }
    write_json(root / "runs" / RUN / "run.json", record)
    return root, record
