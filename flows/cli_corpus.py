"""Corpus commands: `forgeplay corpus world` (the fictional encyclopedia with multi-hop
questions) and `forgeplay corpus import` (HotpotQA / 2WikiMultihopQA / plain JSONL and
Parquet question sets, or documents alone: `{title, text}` rows or a folder of pages). Both
write `documents` and `triples` shards (documents alone: passages, no triples). `forgeplay
corpus questions` builds multi-hop triples from a dataset's documents by a model, each
checked before it is kept (validators/chain_run.py).

    forgeplay corpus world --seed 7 --entities 2000 --dataset world7
    forgeplay corpus import hotpot_dev_distractor_v1.json --dataset hotpot
    forgeplay corpus import pages/ --dataset mine --passage-words 200 --passage-overlap 40
    forgeplay corpus questions --dataset mine --max-chains 100 --backend openai --base-url http://127.0.0.1:8000/v1
    forgeplay sql "SELECT qtype, hop_count, count(*) FROM world7_triples GROUP BY ALL"
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from storage.configcli import USER_ERRORS, DataRoot, config_command, fail, old_spelling
from storage.manifest import resolve_root
from storage import manifest

console = Console()
err = Console(stderr=True)
corpus_app = typer.Typer(no_args_is_help=True, help="Build or import corpora: documents plus (question, golden context, answer) triples.")


# the dataset a corpus command writes: --dataset, as in every command (--out until this release)
Dataset = Annotated[Optional[str], typer.Option("--dataset", help="Dataset to write (documents and triples). \\[required]")]
OldOut = Annotated[Optional[str], typer.Option("--out", hidden=True, help="deprecated: use --dataset")]


def _dataset(dataset: Optional[str], old: Optional[str]) -> str:
    """--dataset, or its old spelling --out (with a one-line deprecation note); required."""
    dataset = old_spelling(dataset, old, "--dataset", "--out")
    if not dataset:
        fail("--dataset is required (the dataset to write)")
    return dataset


def _help(name: str) -> str:
    from generators.corpus.build import WorldConfig

    return {f.name: f.metadata.get("help", "") for f in fields(WorldConfig)}[name]


def _check_names(dataset: str, run_id: Optional[str]) -> None:
    try:
        manifest.check_name("dataset name", dataset)
        if run_id is not None:
            manifest.check_name("run id", run_id)
    except ValueError as e:
        fail(str(e))


def _progress() -> Progress:
    return Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=False)


def world(dataset: Dataset = None,
          seed: Annotated[int, typer.Option(help=_help("seed"))] = 7,
          entities: Annotated[int, typer.Option(help=_help("entities"))] = 2000,
          triples: Annotated[Optional[int], typer.Option(help=_help("triples"))] = None,
          qtypes: Annotated[str, typer.Option(help="Question type mix as NAME=SHARE,... "
                                              "(shares are normalised).")] = "bridge=0.4,comparison=0.2,compositional=0.2,inference=0.2",
          verify: Annotated[bool, typer.Option(help=_help("verify"))] = True,
          run_id: Annotated[Optional[str], typer.Option(help="Run id (default: world-<config hash>).")] = None,
          data_root: DataRoot = None, old_out: OldOut = None) -> None:
    """Generate the fictional world encyclopedia and its multi-hop questions.

    One document per entity (people, places, organisations, works, events, science concepts) and questions of four types: bridge (2-4 hops), comparison, compositional and inference, each with golden documents, supporting sentences, hop count and answer aliases. The same seed always gives the same corpus.
    """
    from generators.corpus.build import WorldConfig, parse_mix, write
    from generators.corpus.world import MIN_ENTITIES

    dataset = _dataset(dataset, old_out)
    _check_names(dataset, run_id)
    if entities < MIN_ENTITIES:
        fail(f"--entities must be at least {MIN_ENTITIES}, got {entities}")
    if triples is not None and triples < 0:
        fail(f"--triples must be >= 0, got {triples}")
    try:
        mix = parse_mix(qtypes)
    except ValueError as e:
        fail(f"--qtypes: {e}")
    cfg = WorldConfig(seed=seed, entities=entities, triples=triples, qtypes=mix, verify=verify)
    total_triples = cfg.resolved()["triples"]
    start = time.perf_counter()
    with _progress() as bar:
        tasks = {"documents": bar.add_task("documents", total=entities),
                 "triples": bar.add_task("triples", total=total_triples),
                 "write": bar.add_task("write", total=None)}
        corpus, rid, written = write(cfg, resolve_root(data_root), dataset, run_id,
                                     progress=lambda phase, n: bar.advance(tasks[phase], n))
        bar.update(tasks["write"], total=bar.tasks[tasks["write"]].completed)
    elapsed = time.perf_counter() - start
    by_type = Counter((r["qtype"], r["hop_count"]) for r in corpus.triple_rows)
    hops = sorted({h for _, h in by_type})
    t = Table(title=f"{dataset}: {len(corpus.document_rows)} documents, {len(corpus.triple_rows)} triples")
    t.add_column("qtype")
    for h in hops:
        t.add_column(f"{h} hops", justify="right")
    t.add_column("total", justify="right")
    for q in cfg.resolved()["qtypes"]:
        row = [by_type.get((q, h), 0) for h in hops]
        t.add_row(q, *map(str, row), str(sum(row)))
    console.print(t)
    short = {k: v for k, v in corpus.rejected.items() if k.endswith("short of target by")}
    for k, v in short.items():
        err.print(f"[yellow]{k} {v}[/yellow] (the world has too few distinct questions of this type)")
    console.print(f"run [bold]{rid}[/bold] in {resolve_root(data_root) / dataset}: wrote {written.get('documents', 0)} "
                  f"documents and {written.get('triples', 0)} triples (new rows) in {elapsed:.1f}s; "
                  f"config in _runs/{rid}.json")


class ImportFormat(str, Enum):
    auto = "auto"
    hotpot = "hotpot"
    jsonl = "jsonl"
    parquet = "parquet"
    documents = "documents"


def _split_help(name: str) -> str:
    from generators.corpus.passages import Split

    return {f.name: f.metadata.get("help", "") for f in fields(Split)}[name]


def import_(file: Annotated[Path, typer.Argument(help="HotpotQA/2Wiki JSON or JSON Lines, plain JSONL, Parquet, "
                                              "documents ({title, text} rows), or a folder of .txt/.md/.html pages.")],
            dataset: Dataset = None,
            format: Annotated[ImportFormat, typer.Option(
                "--format", help="auto: detect the file type and each record's layout; hotpot: JSON/JSONL "
                "records with context and supporting_facts; jsonl: plain records (all context is golden); "
                "parquet: a Parquet file, layout detected per record; documents: every record is a "
                "document ({title, text}, no question). auto reads a record without a question but with "
                "a text as a document, and a folder as pages.")] = ImportFormat.auto,
            passage_words: Annotated[int, typer.Option(help=_split_help("passage_words"))] = 200,
            passage_overlap: Annotated[int, typer.Option(help=_split_help("passage_overlap"))] = 40,
            source: Annotated[Optional[str], typer.Option(help="Source label stored on every row (default: import:<file name>).")] = None,
            run_id: Annotated[Optional[str], typer.Option(help="Run id (default: import-<hash of file and options>).")] = None,
            show: Annotated[int, typer.Option(help="Rejected records listed at most.")] = 50,
            data_root: DataRoot = None, old_out: OldOut = None) -> None:
    """Import a multi-hop QA file as documents and triples, or documents alone as passages.

    Documents (records with title and text but no question, or the .txt, .md and .html files of a folder) are split into passages of at most --passage-words words; passage ids come from the document id, the passage index and the passage text, so a rerun makes the same ids. Bad records (a broken file of a folder: by its path) are skipped and listed with their line number (JSON Lines), array index (JSON) or row (Parquet), their _id and the reason; all of them are also written to <root>/<DATASET>/_runs/<run_id>.rejects.jsonl. Re-importing the same file into the same run writes nothing twice.
    """
    from generators.corpus.folder import pages
    from generators.corpus.importer import import_file
    from generators.corpus.passages import Split
    from storage.userfiles import detect_container

    dataset = _dataset(dataset, old_out)
    _check_names(dataset, run_id)
    split = Split(passage_words, passage_overlap)
    try:
        split.check()
    except ValueError as e:
        fail(str(e))
    if file.is_dir():
        if format not in (ImportFormat.auto, ImportFormat.documents):
            fail(f"{file} is a folder of pages: use --format auto or documents")
        if not pages(file):
            fail(f"no .txt, .md or .html file in {file}")
        container = "folder"
    elif not file.is_file():
        fail(f"no such file: {file}")
    else:
        try:
            container = detect_container(file)
        except (OSError, UnicodeDecodeError) as e:
            fail(f"cannot read {file}: {e}")
    style = {"auto": "auto", "hotpot": "hotpot", "jsonl": "plain", "parquet": "auto",
             "documents": "documents"}[format.value]
    if format == ImportFormat.parquet and container != "parquet":
        fail(f"--format parquet but {file.name} does not end in .parquet")
    if format in (ImportFormat.hotpot, ImportFormat.jsonl) and container == "parquet":
        fail(f"--format {format.value} reads JSON or JSON Lines; use --format parquet or auto for {file.name}")
    start = time.perf_counter()
    try:
        with _progress() as bar:
            task = bar.add_task("records", total=None)
            report = import_file(file, resolve_root(data_root), dataset, style=style, container=container,
                                 source=source, run_id=run_id, split=split, progress=lambda n: bar.advance(task, n))
    except (OSError, UnicodeDecodeError) as e:
        fail(f"cannot read {file}: {e}")
    except Exception as e:  # pyarrow errors on a broken Parquet file
        if type(e).__module__.startswith("pyarrow"):
            fail(f"cannot read {file} as Parquet: {e}")
        raise
    elapsed = time.perf_counter() - start
    t = Table(title=f"{file.name} -> {dataset} (run {report.run_id}, {report.container})")
    t.add_column("")
    t.add_column("count", justify="right")
    for label, n in [("records read", report.records), ("imported", report.imported),
                     ("of them documents (no question)", report.texts), ("rejected", len(report.rejects)),
                     ("distinct documents (passages)", report.documents),
                     ("new document rows", report.written.get("documents", 0)),
                     ("new triple rows", report.written.get("triples", 0))]:
        t.add_row(label, str(n))
    console.print(t)
    if report.qtypes:
        q = Table(title="triples by type and hop count")
        q.add_column("qtype")
        q.add_column("triples", justify="right")
        for name, n in sorted(report.qtypes.items()):
            q.add_row(name, str(n))
        q.add_row("hops", ", ".join(f"{h}: {n}" for h, n in sorted(report.hops.items())))
        console.print(q)
    if report.rejects:
        r = Table(title=f"{len(report.rejects)} skipped records")
        for c in ("where", "_id", "reason"):
            r.add_column(c, overflow="fold")
        for rej in report.rejects[:show]:
            r.add_row(rej["where"], rej["_id"] or "", rej["reason"])
        console.print(r)
        if len(report.rejects) > show:
            console.print(f"... and {len(report.rejects) - show} more")
        rejects = resolve_root(data_root) / dataset / "_runs" / f"{report.run_id}.rejects.jsonl"
        console.print(f"all rejects: {rejects}")
    console.print(f"done in {elapsed:.1f}s")
    if report.records and not report.imported:
        fail("no record could be imported")


corpus_app.command("world")(world)
corpus_app.command("import")(import_)


def _questions_command() -> None:
    from generators.llm.registry import BackendConfig
    from validators.chain_run import QuestionsConfig

    @config_command(corpus_app, "questions", QuestionsConfig, BackendConfig, errors=USER_ERRORS,
                    label="corpus questions")
    def questions(cfg: QuestionsConfig, backend: BackendConfig, data_root=None) -> None:
        """Build multi-hop triples from a dataset's documents alone: chains of 2-3 passages
        linked by a title or a frequent name one mentions, the documents' own links or the
        retriever's neighbours; the model writes each chain's question from its question
        construction path, the answer a span of the last passage. A candidate is kept only if
        the answer is in the last passage and not in the question, a reader (the same model)
        answers it from the chain's passages, and neither from the last passage alone nor
        from the retriever's top-k without the chain. Kept triples go to the dataset's triples
        (read by synthesize, selfplay, evaluation and the exports), every candidate's verdict
        to its verdicts. A rerun resumes and writes nothing twice."""
        from validators.chain_run import check_inputs, run_questions

        root = resolve_root(data_root)
        check_inputs(cfg, backend, root)
        start = time.perf_counter()
        with _progress() as bar:
            task = bar.add_task("chains", total=cfg.max_chains)
            report = run_questions(cfg, backend, root, progress=lambda n: bar.advance(task, n))
            bar.update(task, total=bar.tasks[task].completed)
        console.print(funnel_table(report))
        console.print(f"run [bold]{report['run_id']}[/bold] in {root / cfg.dataset}: "
                      f"{report['written'].get('triples', 0)} new triples, {report['written'].get('verdicts', 0)} "
                      f"new verdicts in {time.perf_counter() - start:.1f}s; rejects: forgeplay sql \"SELECT reason, "
                      f"count(*) FROM {cfg.dataset}_verdicts WHERE record_kind = 'triples' GROUP BY ALL\"")


def funnel_table(report: dict) -> Table:
    """The question builder's funnel: chains, then kept and each reject reason."""
    from validators.reasons import describe

    f = report["funnel"]
    t = Table(title=f"{report['dataset']}: {report['passages']} passages -> {f.get('chains', 0)} chains")
    for c in ("", "count", "meaning"):
        t.add_column(c, justify="right" if c == "count" else "left")
    t.add_row("chains", str(f.get("chains", 0)), "chains of passages taken (--max-chains)")
    t.add_row("done before", str(f.get("done before", 0)), "chains this run had already decided (resumed)")
    t.add_row("no answer span", str(f.get("no answer span", 0)), "chains dropped: no answer span in the last passage")
    t.add_row("kept", str(f.get("kept", 0)), "triples written")
    for k, n in sorted(f.items(), key=lambda kv: -kv[1]):
        if k in ("chains", "done before", "no answer span", "kept") or " hops " in k:
            continue
        t.add_row(k, str(n), describe(k))
    for k in sorted(k for k in f if " hops " in k):
        t.add_row(k, str(f[k]), "")
    return t


_questions_command()


def register(app: typer.Typer) -> None:
    """Add the `corpus` command group to the main app."""
    app.add_typer(corpus_app, name="corpus")
