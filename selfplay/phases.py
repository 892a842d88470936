"""Committing an examine phase: its rows (`rollouts`, `verdicts`, and `tasks` for the accepted
outputs, as `play.examined` makes them) under the phase's run id. `commit_examine` is what
the `selfplay` flow's examine task does with sampled outputs; `replay_examine` does it with
given examiner conversations instead and marks the phase done, so a `selfplay` run with
`--resume` goes on from the attempts. The replay is for what the examiner cannot yet write
itself: tests and benchmarks of the later phases on a small or random model, and an
iteration 0 on demonstrated tasks (`--demo-tasks`: `demonstrated` draws them from the
world's warm-start demonstrations, selfplay/warmstart.py). Replayed tasks are not read for
answerability (selfplay/answerable.py needs a reader model), and their rollouts say
`"replayed": true` in their meta.

    commit_examine(root, cfg, run, 0, examine(backend, sim, docs, tools, cfg, run, 0))
    replay_examine(root, cfg, run_id(cfg, root), 0, [(messages, start_doc, target_hops), ...], documents)
    run_selfplay(replace(cfg, resume=True), root)
"""

from __future__ import annotations

from collections import Counter

from selfplay.play import PlayConfig, examined, phase_run
from selfplay.warmstart import demonstrations, examiner_tool
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


def commit_replayed(root, cfg: PlayConfig, run: str, iteration: int,
                    conversations: list[tuple[list[dict], dict, int]], documents: list[dict]) -> dict:
    """Commit (messages, start document, target hops) conversations as iteration `iteration`'s
    examine phase of `run`, as the examiner's outputs would be; the phase summary."""
    texts = {d["doc_id"]: (d["title"], d["text"]) for d in documents}
    outs = [examined(m, doc, h, cfg, run, iteration, j, texts, replayed=True)
            for j, (m, doc, h) in enumerate(conversations)]
    return {**commit_examine(root, cfg, run, iteration, outs), "replayed": True}


def replay_examine(root, cfg: PlayConfig, run: str, iteration: int, conversations: list[tuple[list[dict], dict, int]],
                   documents: list[dict]) -> dict:
    """`commit_replayed`, then the phase marked done (a `selfplay` run with --resume goes on
    from the attempts); the phase summary."""
    summary = commit_replayed(root, cfg, run, iteration, conversations, documents)
    save_run_config(root, cfg.out_dataset(), phase_run(run, iteration, "examine"), cfg, extra={"summary": summary})
    return summary


def replay_conversations(demos: list[dict], documents: list[dict]) -> list[tuple[list[dict], dict, int]]:
    """Warm-start demonstrations (selfplay/warmstart.py) as what `commit_replayed` takes:
    (messages, start document, target hops)."""
    by_id = {d["doc_id"]: d for d in documents}
    return [(d["trajectory"]["messages"], by_id[d["task"]["qcp"]["seed_doc_id"]], d["task"]["hop_count"]) for d in demos]


def demonstrated(cfg: PlayConfig, documents: list[dict], triples: list[dict], simulator,
                 tools: list[dict]) -> list[tuple[list[dict], dict, int]]:
    """`--demo-tasks`: `cfg.tasks` examiner conversations from the world's warm-start
    demonstrations (drawn with the run's hop mix and seed), as (messages, start document,
    target hops); ValueError when the triples make none (an imported corpus may have no chains)."""
    demos, skipped = demonstrations(documents, triples, simulator, examiner_tool(tools), hop_mix=cfg.hop_mix,
                                    n=cfg.tasks, seed=cfg.seed, dataset=cfg.dataset)
    if not demos:
        raise ValueError(f"--demo-tasks: the triples of {cfg.dataset!r} make no demonstration "
                         f"({', '.join(f'{k} {v}' for k, v in sorted(skipped.items())) or 'no triples'})")
    return replay_conversations(demos[:cfg.tasks], documents)
