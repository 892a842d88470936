"""Committing an examine phase: its rows (`rollouts`, `verdicts`, and `tasks` for the accepted
outputs, as `play.examined` makes them) under the phase's run id. `commit_examine` is what
the `selfplay` flow's examine task does with sampled outputs; `replay_examine` does it with
given examiner conversations instead and marks the phase done, so a `selfplay` run with
`--resume` goes on from the attempts. The replay is for what the examiner cannot yet write
itself: tests and benchmarks of the later phases on a small or random model, and an
iteration 0 on demonstrated tasks (selfplay/warmstart.py). Replayed tasks are not read for
answerability (selfplay/answerable.py needs a reader model).

    commit_examine(root, cfg, run, 0, examine(backend, sim, docs, tools, cfg, run, 0))
    replay_examine(root, cfg, run_id(cfg, root), 0, [(messages, start_doc, target_hops), ...], documents)
    run_selfplay(replace(cfg, resume=True), root)
"""

from __future__ import annotations

from collections import Counter

from selfplay.play import PlayConfig, examined, phase_run
from storage.resumable import RunWriter
from storage.runs import save_run_config


def commit_examine(root, cfg: PlayConfig, run: str, iteration: int, outs: list[dict]) -> dict:
    """Commit examiner outputs (rollouts, verdicts, then tasks); the phase summary."""
    writer, ds = RunWriter(root, phase_run(run, iteration, "examine"), {"config_hash": run}), cfg.out_dataset()
    writer.commit(ds, "rollouts", [o["rollout"] for o in outs])
    writer.commit(ds, "verdicts", [v for o in outs for v in o["verdicts"]])
    tasks = [o["task"] for o in outs if o["task"]]
    if tasks:
        writer.commit(ds, "tasks", tasks)
    reasons = Counter(o["reason"] for o in outs if o["reason"])
    return {"examiner_outputs": len(outs), "tasks": len(tasks), "rejects": dict(sorted(reasons.items()))}


def replay_examine(root, cfg: PlayConfig, run: str, iteration: int, conversations: list[tuple[list[dict], dict, int]],
                   documents: list[dict]) -> dict:
    """Commit (messages, start document, target hops) conversations as iteration `iteration`'s
    examine phase of `run` and mark it done; the phase summary."""
    texts = {d["doc_id"]: (d["title"], d["text"]) for d in documents}
    outs = [examined(m, doc, h, cfg, run, iteration, j, texts) for j, (m, doc, h) in enumerate(conversations)]
    summary = {**commit_examine(root, cfg, run, iteration, outs), "replayed": True}
    save_run_config(root, cfg.out_dataset(), phase_run(run, iteration, "examine"), cfg, extra={"summary": summary})
    return summary
