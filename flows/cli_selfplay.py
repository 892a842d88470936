"""`forgeplay selfplay`: π-Play self-play from the command line (flows/selfplay.py). `run`
runs self-play iterations (options from PlayConfig); `warmstart` builds the examiner's
demonstrations from a world dataset and fine-tunes an examiner on them (options from
WarmstartConfig and TrainConfig)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from selfplay.play import PlayConfig
from selfplay.warmstart import WarmstartConfig
from generators.tools.passages import RetrieverError
from storage.configcli import USER_ERRORS, config_command
from train.configs import TrainConfig


def _demo_table(demos: dict) -> Table:
    """Demonstrations by hop count and triples left out by reason."""
    t = Table("", "value", "count", title=f"{demos['demonstrations']} demonstrations in {demos['dataset']} "
              f"({demos['committed_now']} committed now) from {demos['triples']} triples")
    rows = [("hop count", str(h), n) for h, n in demos["by_hop_count"].items()]
    rows += [("left out", r, n) for r, n in sorted(demos["left_out"].items(), key=lambda kv: -kv[1])]
    for what, value, n in rows:
        t.add_row(what, value, str(n))
    return t


def register(app: typer.Typer) -> None:
    sp = typer.Typer(help="π-Play self-play: an examiner that builds tasks with their question construction "
                          "paths, a student taught by reward and by a teacher that sees them.", no_args_is_help=True)

    @config_command(sp, "warmstart", WarmstartConfig, TrainConfig, errors=USER_ERRORS + (RetrieverError,))
    def warmstart(cfg: WarmstartConfig, train: TrainConfig, data_root=None) -> None:
        """Build examiner demonstrations from a world dataset's triples (start page, a search
        for each hop's page, question and answer; each checked by the examiner's parser and
        task rules) as `trajectories` and `tasks`, and with --out fine-tune an examiner on
        them (the SFT stage, a Prefect flow)."""
        from flows.selfplay import run_warmstart

        summary = run_warmstart(cfg, train, data_root)
        console = Console()
        console.print(_demo_table(summary["demos"]))
        if summary["training"]:
            tr = summary["training"]
            console.print(f"examiner: {tr['final_model']} after {tr['steps']} steps "
                          f"(loss {tr['first'].get('loss', float('nan')):.3f} -> {tr['last'].get('loss', float('nan')):.3f})")

    @config_command(sp, "run", PlayConfig, errors=USER_ERRORS + (RetrieverError,), label="selfplay", group_default=True)
    def run(cfg: PlayConfig, data_root=None) -> None:
        """Self-play iterations (a Prefect flow): unless --no-warmstart, the examiner is first
        fine-tuned on the world's demonstrations; it builds tasks from start documents by
        searching (each output a task or a reject with its reason, a task also when the reader
        cannot answer it from its path's documents or can without them), the student attempts
        each task --attempts times, then the examiner is updated from how hard its tasks were
        (HRPO) and the student from exact match plus its EMA teacher, which also reads each
        task's question construction path. Writes tasks, rollouts of both roles and verdicts
        per iteration to --out-dataset and models to --checkpoints; --no-train only writes the data;
        --resume continues a killed run."""
        from flows.selfplay import run_selfplay

        s = run_selfplay(cfg, data_root)
        console = Console()
        console.print(_iteration_table(s))
        if cfg.train:
            console.print(_timing_table(s))
            console.print(f"models: {s['models']}")

    app.add_typer(sp, name="selfplay")


def _iteration_table(s: dict) -> Table:
    t = Table("iteration", "examiner outputs", "tasks", "attempts", "student EM", "mean examiner reward",
              "examiner loss", "student loss",
              title=f"self-play {s['run_id']} -> {s['dataset']} ({s['skipped_phases']} phases already done)")
    for it in s["iterations"]:
        rewards = [x["examiner_reward"] for x in it["scores"]]
        em = "-" if it["student_em"] is None else f"{it['student_em']:.3f}"
        loss = lambda k: f"{it[k]:.4f}" if it.get(k) is not None else "-"  # noqa: E731
        t.add_row(str(it["iteration"]), str(it["examiner_outputs"]),
                  f"{it['tasks']} demonstrated" if it.get("replayed") else str(it["tasks"]), str(it["attempts"]), em,
                  f"{sum(rewards) / len(rewards):.3f}" if rewards else "-", loss("examiner_loss"), loss("student_loss"))
    return t


TIMES = [("examiner warm-start", "warmstart_s"), ("examiner generation", "generation_s"), ("filter", "filter_s"),
         ("student attempts", "attempts_s"),
         ("examiner update", "examiner_update_s"), ("student update", "student_update_s"),
         ("  of which teacher scoring", "teacher_s")]


def _timing_table(s: dict) -> Table:
    """Seconds of each phase per iteration (a phase done by an earlier run shows its time then)."""
    t = Table("phase", *[f"iteration {it['iteration']}" for it in s["iterations"]], title="seconds per phase")
    for name, key in TIMES:
        t.add_row(name, *[f"{it[key]:.1f}" if it.get(key) is not None else "-" for it in s["iterations"]])
    return t
