"""The `acquire-labels` Prefect flow: active label acquisition over a dataset's prompts
(acquire/session.py), one task per batch. Before the first batch the ledger
(`<out>/_ledger.sqlite`, the budget set to `budget`) recovers reservations that a killed run
left (settled when their label reached the labels shard, released otherwise); a batch whose
rollouts are committed is skipped, so a rerun continues where a killed run stopped and pays
for nothing twice. CARE's probes are saved after each batch (`<out>/_care/<run>.pt`) and
loaded by a rerun. The source is built from the registry (acquire/sources.py: column,
queue, llm) and closed at the end; the result has its summary (`source`: e.g. the queue
files written for people to fill in). With `--rollout-backend openai` every answer is
journaled as it arrives (`<out>/_journal/<run>.jsonl`, removed once every batch is
committed), so a killed run resumed asks the server nothing it had answered; with a server
the next batches are sampled while one is scored and bought (acquire/session.py).

    forgeplay acquire-labels --dataset world --strategy care --budget 200 --source column
    run_acquire(AcquireConfig(dataset="world", strategy="random", budget=20))   # from Python
"""

from __future__ import annotations

import io
from functools import partial
from dataclasses import asdict

from acquire.buy import labelled_ids
from acquire.ledger import Ledger
from acquire.session import AcquireConfig, Session, load_prompts
from acquire.sources import make_source
from flows.common import Stages, require_world, tie_temporary_server
from flows.engine import flow, task
from generators.llm.model_store import check_model
from storage import resolve_root
from storage.journal import Journal, journal_path
from storage.manifest import dataset_dir
from storage.resumable import RunWriter
from storage.runs import config_hash, without_later_defaults


UNHASHED = ("budget", "limit", "backend", "url", "served_model")  # not part of the run's identity
LATER_DEFAULTS = {"tools": "auto"}  # options added after runs were made, with the default they had


@task(name="acquire-batch")
def batch_task(session: Session, prompts: list, step: int, learned=None, outs=None) -> dict:
    return session.run_batch(prompts, step, learned, outs)


def _probes_path(root, cfg: AcquireConfig, run: str, step: int | None = None):
    """The probes after the run's last batch, or (`step`) as they were once batch `step` had
    learned, saved before its rollouts commit: a run killed between the two resumes with the
    probes of the last batch whose rollouts are committed, neither behind nor ahead of it."""
    name = f"{run}.pt" if step is None else f"{run}.step-{step}.pt"
    return dataset_dir(root, cfg.labels_dataset()) / "_care" / name


def _save_probes(probes, path) -> None:
    import torch

    from storage.files import write_bytes

    buf = io.BytesIO()
    torch.save(probes.state_dict(), buf)
    write_bytes(path, buf.getvalue())


@flow(name="acquire-labels", log_prints=True)
def acquire_flow(config: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Acquire labels batch by batch (module docstring); the counts per batch and the ledger."""
    tie_temporary_server()
    import torch

    from acquire.group import scorer
    from acquire.strategies import get_strategy
    from generators.synth.synthesize import load_inputs
    from generators.tools.banks import bank_rows
    from generators.tools.base import base_rows
    from generators.tools.simulator import Simulator
    from train.evaluate import sampling_backend

    cfg, root = AcquireConfig(**config), resolve_root(data_root)
    cfg.check()
    out = cfg.labels_dataset()
    # the run is what is asked, not who samples it: a rerun through another backend continues it
    asked = without_later_defaults({k: v for k, v in asdict(cfg).items() if k not in UNHASHED}, LATER_DEFAULTS)
    run = f"acquire-{config_hash(asked)}"
    ledger = Ledger(dataset_dir(root, out) / "_ledger.sqlite", budget=cfg.budget)
    recovered = ledger.recover(labelled_ids(root, out))
    prompts = load_prompts(root, cfg)
    writer = RunWriter(root, run, {"config_hash": run})
    done = set(writer.committed(out, "rollouts", "prompt_id").to_pylist())
    docs = load_inputs(root, cfg.dataset).documents
    tools = bank_rows(cfg.tools, docs, base_rows)  # auto: the corpus's own for an imported corpus
    source = make_source(cfg, root, prompts, ledger)
    # a server's answers are journaled as they arrive: a killed run resumed asks none of them again
    journal = Journal(journal_path(root, out, run)) if cfg.backend == "openai" else None
    try:
        backend = sampling_backend(cfg.backend, cfg.model, cfg.url, cfg.served_model, max(8, cfg.n),
                                   cfg.turn_cache_mb, journal)
    except BaseException:
        source.close()
        raise
    stages, batches, skipped = Stages(), [], 0
    try:
        lm = backend.lm
        if lm is None and get_strategy(cfg.strategy).needs in ("logprobs", "states"):
            lm = scorer(cfg.model)  # a served backend samples; the signals come from this process
        probes = None
        if cfg.strategy == "care":
            from acquire.probes import Probes

            probes = Probes(lm.config.hidden_size, cfg.n, seed=cfg.seed)
            starts = range(0, len(prompts), cfg.batch)
            last = max((i for i, a in enumerate(starts) if all(p.prompt_id in done for p in prompts[a:a + cfg.batch])),
                       default=None)
            if last is not None and _probes_path(root, cfg, run, last).exists():
                probes.load_state_dict(torch.load(_probes_path(root, cfg, run, last), weights_only=False))
        session = Session(cfg, root, backend, Simulator(docs, seed=cfg.seed, tools=tools), tools, ledger, writer,
                          source, probes, lm)
        todo = []
        for step, start in enumerate(range(0, len(prompts), cfg.batch)):
            chunk = prompts[start:start + cfg.batch]
            if all(p.prompt_id in done for p in chunk):
                skipped += 1
            else:
                todo.append((step, chunk))
        for step, chunk, outs in session.rolled(todo):  # a server samples the next batches meanwhile
            with stages.stage(f"batch {step}", rows_in=len(chunk)) as st:
                counts = batch_task(session, chunk, step, None if probes is None else partial(
                    _save_probes, probes, _probes_path(root, cfg, run, step)), outs)
                st.rows_out, st.notes = counts["bought"], f"{counts['chosen']} chosen"
            if probes is not None:
                _save_probes(probes, _probes_path(root, cfg, run))
                _probes_path(root, cfg, run, step - 1).unlink(missing_ok=True)  # a resume needs only the last
            batches.append({"step": step, **counts})
    finally:
        backend.close()
        source.close()
        if journal is not None:
            journal.close()  # kept unless every batch is committed: a rerun reads its answers back
    if journal is not None:
        journal.remove()
    summary = ledger.summary()
    report = stages.publish("acquire-labels", f"labels for {cfg.dataset} ({cfg.strategy})",
                            {"ledger": {k: v for k, v in summary.items() if isinstance(v, (int, float))}})
    return {"run_id": run, "dataset": out, "batches": batches, "skipped_batches": skipped, "recovered": recovered,
            "ledger": summary, "source": source.summary(), "report": report}


def run_acquire(cfg: AcquireConfig, data_root=None, progress: bool = True) -> dict:
    """The flow, after its options and what they name are checked (the world dataset, the
    policy and an in-process annotator model) before a model loads or a server starts."""
    cfg.check()
    require_world(resolve_root(data_root), cfg.dataset)
    check_model(cfg.model)  # the annotator's model: cfg.check (LabelConfig.check_labelling)
    return acquire_flow(asdict(cfg), str(data_root) if data_root else None, progress)
