"""Report sections read from the run record and the files it names: the stage table, the
validation funnel, training curves (each training run's metrics.jsonl), held-out exact match
and label spend (the labels dataset's ledger and labels shard, acquire/report.py). Each takes
a RunContext and returns a Section, or raises Absent.
"""

from __future__ import annotations

from reports import plots
from reports.context import Absent, RunContext
from reports.html import Image, Section, Table

CURVE_KEYS = ("loss", "reward")
EVAL_COLUMNS = ("rollouts", "em", "f1", "answered", "well_formed")


def stages(ctx: RunContext) -> Section:
    recorded = ctx.record.get("stages") or {}
    if not recorded:
        raise Absent("no stage recorded")
    names = list(recorded)  # the order the loop ran them in
    rows = [[n, recorded[n].get("status"), recorded[n].get("seconds"), recorded[n].get("rows_in"),
             recorded[n].get("rows_out"), recorded[n].get("notes", "")] for n in names]
    seconds = {n: recorded[n].get("seconds") or 0 for n in names}
    return Section(images=[Image("seconds per stage", plots.bars("Wall seconds per stage", {"seconds": seconds},
                                                                 ylabel="seconds", horizontal=True))],
                   tables=[Table(["stage", "status", "seconds", "rows in", "rows out", "notes"], rows, "stages")])


def funnel(ctx: RunContext) -> Section:
    s = ctx.summary("validate")
    if "funnel" not in s:
        raise Absent("the validate stage's summary has no funnel")
    rejected = [f for f in s["funnel"] if f.get("rejected")]
    rows = [["rows in", "", "", "", s.get("rows_in")]]
    rows += [["rejected", f["layer"], f.get("check") or "", f.get("reason") or "", f["rejected"]] for f in rejected]
    rows.append(["accepted", "", "", "", s.get("rows_out")])
    bars = {"rows in": s.get("rows_in") or 0, **{f"{f['layer']}/{f['reason']}": f["rejected"] for f in rejected},
            "accepted": s.get("rows_out") or 0}
    layers: dict[str, list] = {}
    for f in s["funnel"]:
        layers.setdefault(f["layer"], [f["layer"], f.get("rows_in"), f.get("rows_out")])
    return Section(notes=[f"Accepted rows go to dataset {s.get('accepted_dataset', '?')} (run {s.get('run_id', '?')})."],
                   images=[Image("validation funnel", plots.bars("Validation funnel", {"rows": bars}, horizontal=True))],
                   tables=[Table(["step", "layer", "check", "reason", "rows"], rows, "funnel"),
                           Table(["layer", "rows in", "rows out"], list(layers.values()), "funnel-layers",
                                 "Rows in and out of each layer")])


def curves(ctx: RunContext) -> Section:
    from train.trainer import read_metrics

    runs = {k: v for k, v in (ctx.record.get("train_runs") or {}).items() if v}
    if not runs:
        raise Absent("no training run recorded")
    section, rows = Section(), []
    for stage, folder in runs.items():
        d = ctx.path(folder)
        files = [d / "metrics.jsonl"] if (d / "metrics.jsonl").is_file() else sorted(d.rglob("metrics.jsonl"))
        panels: dict[str, dict] = {}
        for f in files:
            recs = [r for r in read_metrics(f.parent) if "step" in r]
            name = str(f.parent.relative_to(d)) if f.parent != d else stage
            for key in CURVE_KEYS:
                points = [(r["step"], r[key]) for r in recs if isinstance(r.get(key), (int, float))]
                if points:
                    panels.setdefault(key, {})[name] = points
            if recs:
                last = {k: next((r[k] for r in reversed(recs) if k in r), None) for k in CURVE_KEYS}
                rows.append([stage, name, len(recs), recs[0].get("loss"), last["loss"], last["reward"]])
        if panels:
            section.images.append(Image(f"{stage} curves", plots.curves(f"{stage}: {folder}", panels)))
    if not rows:
        raise Absent(f"no metrics.jsonl in the training runs ({', '.join(runs)})")
    section.tables.append(Table(["stage", "run", "steps", "first loss", "last loss", "last reward"], rows, "curves"))
    return section


def held_out(ctx: RunContext) -> Section:
    evals = {k: v for k, v in (ctx.record.get("eval") or {}).items() if isinstance(v, dict)}
    if not evals:
        raise Absent("no evaluation recorded")
    overall = [[stage, *(e.get(c) for c in EVAL_COLUMNS)] for stage, e in evals.items()]
    qtypes = list(dict.fromkeys(q for e in evals.values() for q in (e.get("by_qtype") or {})))
    by_qtype = [[q, stage, *((e.get("by_qtype") or {}).get(q, {}).get(c) for c in EVAL_COLUMNS)]
                for q in qtypes for stage, e in evals.items()]
    series = {stage: {"all": e.get("em") or 0, **{q: v.get("em") or 0 for q, v in (e.get("by_qtype") or {}).items()}}
              for stage, e in evals.items()}
    return Section(images=[Image("held-out exact match", plots.bars("Held-out exact match", series,
                                                                    xlabel="question type", ylabel="EM"))],
                   tables=[Table(["model", *EVAL_COLUMNS], overall, "eval"),
                           Table(["question type", "model", *EVAL_COLUMNS], by_qtype, "eval-qtype",
                                 "Per question type")])


def label_spend(ctx: RunContext) -> Section:
    from acquire.report import label_report

    dataset = ctx.dataset("labels")
    try:
        report = label_report(ctx.root, dataset)
    except FileNotFoundError as e:
        raise Absent(str(e)) from None
    strategies = report["strategies"]
    if not strategies:
        raise Absent(f"no label bought in dataset {dataset!r}")
    ledger = report["ledger"]
    rows = [[name, s["bought"], s["cost"], s["corrected"], s["share"]] for name, s in strategies.items()]
    series = {"cost": {n: s["cost"] for n, s in strategies.items()},
              "labels": {n: s["bought"] for n, s in strategies.items()}}
    return Section(notes=[f"Ledger of {dataset}: budget {ledger['budget']}, spent {ledger['spent']}, "
                          f"left {ledger['left']}, {ledger['labels']} labels paid, {ledger['queued']} queued."],
                   images=[Image("label spend", plots.bars("Label spend per strategy", series, ylabel="cost / labels"))],
                   tables=[Table(["strategy", "bought", "cost", "corrected the vote", "share corrected"], rows,
                                 "labels")])


def shards(ctx: RunContext) -> Section:
    s = ctx.record.get("shards")
    if not s:
        raise Absent("the run recorded no shard check")
    bad = s.get("quarantined") or []
    per = {ds: [ds, n, 0] for ds, n in (s.get("datasets") or {}).items()}
    for p in bad:
        per.setdefault(p.get("dataset"), [p.get("dataset"), None, 0])[2] += 1
    note = (f"{len(bad)} of {s.get('checked')} committed shards failed their checksum check and are quarantined: "
            "no stage read them after, and the dataset cards leave them out." if bad else
            f"All {s.get('checked')} committed shards of the run's datasets match their checksums.")
    tables = [Table(["dataset", "shards", "quarantined"], list(per.values()), "shards")]
    if bad:
        tables.append(Table(["dataset", "kind", "problem", "path"],
                            [[p.get("dataset"), p.get("kind"), p.get("problem"), p.get("path")] for p in bad],
                            "quarantined", "Quarantined shards"))
    return Section(notes=[note], tables=tables)
