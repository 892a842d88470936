"""`forgeplay synthesize`: the ToolForge-style synthesis flow from the command line.
Options come from SynthConfig, BackendConfig and RunnerConfig (storage/configcli.py);
`--workers` and the task runner are no part of the run id (the rows do not depend on them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import typer
from rich.console import Console
from rich.table import Table

from flows.runners import RunnerConfig
from storage.configcli import config_command
from generators.llm.base import BackendError
from generators.tools.retriever import RetrieverError
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig


@dataclass
class CommandOptions:
    """Options of the command that are no part of a run's config (nor of its run id)."""

    workers: int = field(default=1, metadata={
        "help": "Chunks in parallel: 1 = one after another in the flow; N > 1 = a pool of N processes, or with "
                "--task-runner dask|ray the workers of the local cluster."})


def _mix_table(summary: dict) -> Table:
    t = Table(title=f"run {summary['run_id']}: {summary['written']} written, "
                    f"{summary['skipped_committed']} already committed")
    t.add_column("mix")
    t.add_column("value")
    t.add_column("count", justify="right")
    for kind in ("case", "route", "text_sources"):
        for k, v in sorted(summary[kind].items(), key=lambda kv: -kv[1]):
            t.add_row(kind, k, str(v))
    return t


def slot_table(summary: dict) -> Table:
    """Per slot kind: texts, the share the model wrote, why the others are templates."""
    t = Table(title="reasoning texts by slot kind")
    for col in ("slot", "texts", "model-written", "template fallbacks (reason: count)"):
        t.add_column(col, justify="right" if col in ("texts", "model-written") else "left")
    for kind, r in summary.get("texts_by_slot", {}).items():
        reasons = ", ".join(f"{k.removeprefix('template:')}: {v}" for k, v in r["fallbacks"].items())
        t.add_row(kind, str(r["texts"]), f"{100 * r['llm_share']:.0f}%", reasons)
    return t


def register(app: typer.Typer) -> None:
    @config_command(app, "synthesize", SynthConfig, BackendConfig, RunnerConfig, CommandOptions,
                    errors=(ValueError, KeyError, BackendError, RetrieverError))
    def synthesize(synth: SynthConfig, backend: BackendConfig, runner: RunnerConfig, opts: CommandOptions,
                   data_root=None) -> None:
        """Synthesize multi-hop tool-calling trajectories (a Prefect flow): builds the gated
        tool bank, plans each triple's route and reflection case, lets the model write the
        reasoning, and commits `tools` and `trajectories` shards to the dataset. `--workers N`
        runs N chunks at once (`--task-runner dask|ray`: on a Dask or Ray cluster, local unless
        `--address`)."""
        from flows.synthesize import run

        summary = run(synth, backend, data_root, runner=runner, workers=opts.workers)
        console = Console()
        if summary["planned"] < summary["asked"]:  # --allow-fewer
            console.print(f"[yellow]{summary['planned']} of the {summary['asked']} asked: the dataset's "
                          f"{summary['triples_in_use']} triples in use allow {summary['per_triple']} each "
                          f"(--per-triple)[/yellow]")
        console.print(_mix_table(summary))
        console.print(slot_table(summary))
        u = summary.get("usage") or {}
        console.print(f"{summary['seconds']:.1f}s total, LLM {summary['llm_seconds']:.1f}s, "
                      f"program share {100 * summary['program_fraction']:.1f}%; "
                      f"{u.get('completion_tokens', 0)} completion tokens "
                      f"({u.get('completion_tokens_per_s', 0):.0f} tok/s)")
