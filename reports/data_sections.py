"""Report sections read from the run's datasets with DuckDB (storage.Catalog views over the
committed shards): the case, route and hop mixes of the synthesized trajectories and of those
validation accepted, their lengths in the model's tokens, and how hard the self-play
examiner's tasks were for the student (solve rate per hop count per iteration).
"""

from __future__ import annotations

from reports import plots
from reports.context import Absent, RunContext
from reports.html import Image, Section, Table

# mix -> (SQL of the value, ORDER BY); synthesis keeps the plan's hop count in meta
MIXES = {"case": ('"case"', "2 DESC, 1"), "route": ("route", "2 DESC, 1"),
         "hops": ("TRY_CAST(json_extract_string(meta, '$.hop_count') AS INTEGER)", "1")}
LENGTH_STATS = ("rows", "min", "median", "p95", "max")
TOKEN_SAMPLE = 1000  # trajectories measured at most (a seeded sample), so the section stays a few seconds


def _where(run_id: str | None) -> tuple[str, list]:
    return ("WHERE run_id = ?", [run_id]) if run_id else ("", [])


def _trajectories(ctx: RunContext) -> dict[str, tuple[str, str | None]]:
    """{"synthesized": (view, run id), "accepted": (...)} of the trajectories the run made."""
    out = {"synthesized": (ctx.view(ctx.dataset("world"), "trajectories"), ctx.run_of("synthesize"))}
    try:
        out["accepted"] = (ctx.view(ctx.dataset("accepted"), "trajectories"), ctx.run_of("validate"))
    except Absent:
        pass
    return out


def mixes(ctx: RunContext) -> Section:
    sources = _trajectories(ctx)
    section = Section()
    for mix, (expr, order) in MIXES.items():
        counts = {}
        for name, (view, run_id) in sources.items():
            where, params = _where(run_id)
            counts[name] = dict(ctx.catalog.rows(f"SELECT {expr} AS v, count(*) FROM {view} {where} "
                                                 f"GROUP BY 1 ORDER BY {order}", params))
        values = list(dict.fromkeys(v for c in counts.values() for v in c))
        rows = [[v, *(c.get(v, 0) for c in counts.values())] for v in values]
        section.images.append(Image(f"{mix} mix", plots.bars(f"{mix.capitalize()} mix", counts, xlabel=mix)))
        section.tables.append(Table([mix, *counts], rows, f"mix-{mix}"))
    if not any(t.rows for t in section.tables):
        raise Absent("no synthesized trajectories")
    return section


def _tokenizer(ctx: RunContext):
    from generators.llm.model_store import ModelNotFoundError, is_model_dir, resolve_model
    from train.prompt_lengths import load_tokenizer

    base = (ctx.record.get("models") or {}).get("base")
    try:
        path = ctx.tokenizer or (ctx.path(base) if base and is_model_dir(ctx.path(base)) else resolve_model(None))
        return path, load_tokenizer(path)
    except (ModelNotFoundError, ValueError) as e:
        raise Absent(f"no tokenizer ({e})") from None


def token_lengths(ctx: RunContext) -> Section:
    from train.prompt_lengths import summary
    from train.sft import template_messages

    view, run_id = _trajectories(ctx)["synthesized"]
    where, params = _where(run_id)
    total = ctx.catalog.scalar(f"SELECT count(*) FROM {view} {where}", params)
    if not total:
        raise Absent("no synthesized trajectories")
    rows = ctx.catalog.rows(f"SELECT route, messages FROM (SELECT route, messages, id FROM {view} {where}) "
                            f"USING SAMPLE reservoir({TOKEN_SAMPLE} ROWS) REPEATABLE (7) ORDER BY id", params)
    path, tok = _tokenizer(ctx)
    texts = [tok.apply_chat_template(template_messages(m), tokenize=False) for _, m in rows]
    lengths = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    by_route: dict[str, list[int]] = {}
    for (route, _), n in zip(rows, lengths):
        by_route.setdefault(route, []).append(n)
    stats = lambda ns: [summary(ns)[k] for k in LENGTH_STATS]  # noqa: E731
    table = [[route, *stats(ns)] for route, ns in sorted(by_route.items())] + [["all", *stats(lengths)]]
    return Section(notes=[f"{len(rows)} of {total} synthesized trajectories, rendered with the chat template as SFT "
                          f"trains on them, counted with the tokenizer of {path}."],
                   images=[Image("token lengths", plots.histogram("Trajectory length", by_route, "tokens"))],
                   tables=[Table(["route", *LENGTH_STATS], table, "tokens")])


def examiner_difficulty(ctx: RunContext) -> Section:
    ds = ctx.dataset("selfplay")
    tasks, rollouts = ctx.view(ds, "tasks"), ctx.view(ds, "rollouts")
    run_id = ctx.run_of("selfplay")
    where, params = ("WHERE t.run_id LIKE ?", [f"{run_id}-it%"]) if run_id else ("", [])
    rows = ctx.catalog.rows(
        f"SELECT t.examiner_step, t.hop_count, count(DISTINCT t.task_id), count(r.rollout_id), "
        f"avg(TRY_CAST(json_extract(r.meta, '$.em') AS DOUBLE)) FROM {tasks} t LEFT JOIN {rollouts} r "
        f"ON r.prompt_id = t.task_id AND json_extract_string(r.meta, '$.role') = 'student' {where} "
        "GROUP BY ALL ORDER BY 1, 2", params)
    if not rows:
        raise Absent(f"no self-play tasks in dataset {ds!r}")
    lines: dict[str, list] = {}
    for it, hops, _, attempts, rate in rows:
        if attempts:
            lines.setdefault(f"hop count {hops}", []).append((it, rate))
    section = Section(tables=[Table(["iteration", "hops", "tasks", "attempts", "solve rate"],
                                    [list(r) for r in rows], "examiner")])
    if lines:
        section.images.append(Image("solve rate", plots.curves("Student solve rate of the examiner's tasks",
                                                               {"solve rate": lines}, xlabel="iteration")))
    else:
        section.notes.append("The student has not attempted these tasks yet.")
    return section
