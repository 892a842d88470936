"""`forgeplay export verl`: Parquet that verl's PPO/GRPO trainer reads, and with `--tool-agent`
what verl's multi-turn tool agent needs to run forgeplay's virtual tools.

    export_verl("demo_valid", "exports/verl", tool_agent=True)   # -> VerlExport (files, lengths, ...)

Files: train.parquet, test.parquet, reward.py (the custom reward, standard library only), the
package forgeplay_verl/ (train/verl_bundle.py) and README.md with the verl command; with
`tool_agent` also tool_config.yaml and the corpus inside the package.

Row: data_source "forgeplay/<dataset>/<qtype>", prompt [{role, content}] (system + user),
ability "multihop_qa" | "tool_use", reward_model {style: "rule", ground_truth: the gold answer},
extra_info {split, index, id, kind, question, answer, aliases, hop_count, qtype,
need_tools_kwargs, what forgeplay's objectives in verl read (train/verl_objective.py; `Labels`):
label (a label bought for the row's question, forgeplay's ledger keys it by triple id; "" none), vote_weight (the
advantage weight of a prompt trained on its vote), format_weight and label_reward (binary or partial), and for tool rows tool_selection (the names offered, verl's per-row tool
filter) and tools_kwargs {<tool name>: {create_kwargs: {golden_doc_ids, seed}}} for each
offered tool and no other (verl looks the called function's name up there:
`tools_kwargs.get(name, {})`; a JSON object of Parquet's JSON type, which verl's dataset loader,
Hugging Face datasets' Json feature, gives as a dict; a tool the row does not offer finds
nothing there, and the tool answers that it is not offered, train/verl_tool.py)}, agent_name
"single_turn_agent" | "tool_agent".
Without `tool_agent` the trajectories' prompts are left out (their tools would not run).

Tools are listed once: by the chat template when it renders `tools=` (verl passes the
schemas of the row's tool_selection; the `<tools>` block is cut from the system prompt), else
in the system prompt as synthesized (the template ignores verl's schemas). Prompt lengths are
counted with the model's tokenizer as verl's dataset filter counts them (train/prompt_lengths.py).

The tools search the corpus of the dataset the trajectories were synthesized from (corpus_of:
a validated `<dataset>_valid` has no documents of its own). The split is by id hash, per
ability, so a test file gets tool rows too.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa
from tqdm.auto import tqdm

from generators.tools.base import base_rows
from generators.tools.compute import calculator_row
from storage import manifest, reader
from storage.files import write_text
from storage.runs import runs_dir
from storage.schema import SHARED_COLUMNS
from train import prompt_lengths, verl_bundle, verl_readme
from train.export import CHAT, CHUNK, EXPORT_KINDS, Item, ParquetRows, Places, Prompts, Source, Split, openai_tools

_TOOLS_BLOCK = re.compile(r"(?:[^\n]*\n)?<tools>\n.*?</tools>", re.DOTALL)  # the block and the line that introduces it


@dataclass
class VerlExport:
    """What an export wrote and measured."""

    files: dict[str, int]
    lengths: dict = field(default_factory=dict)  # prompt_lengths.summary, {} when not measured
    tools_in: str = ""  # "system" | "template" | "" (no tool rows)
    corpus: str | None = None
    left_out: int = 0  # tool-use prompts not exported (no --tool-agent)
    requirements: list[str] = field(default_factory=list)  # pip packages the tool adapter needs beside verl
    tokenizer: str = ""  # the folder whose tokenizer counted the prompts
    tool_names: list[str] = field(default_factory=list)  # the tools of tool_config.yaml


@dataclass
class Labels:
    """What label-aware GRPO inside verl reads per row: the labels bought so far (prompt id ->
    label, forgeplay's ledger), the weight of a prompt trained on its vote, the format reward."""

    bought: dict[str, str] = field(default_factory=dict)
    vote_weight: float = 0.0
    format_weight: float = 0.0
    reward: str = "binary"  # label-aware rewards: binary (exact match) or partial (GRPOConfig.label_reward)


def verl_schema(tool_names: list[str]) -> pa.Schema:
    extra = [("split", pa.string()), ("index", pa.int64()), ("id", pa.string()), ("kind", pa.string()),
             ("question", pa.string()), ("answer", pa.string()), ("aliases", pa.list_(pa.string())),
             ("hop_count", pa.int64()), ("qtype", pa.string()), ("need_tools_kwargs", pa.bool_()),
             ("label", pa.string()), ("vote_weight", pa.float64()), ("format_weight", pa.float64()),
             ("label_reward", pa.string())]
    if tool_names:  # tool rows: their tools and the JSON object verl reads as a dict (module docstring)
        extra += [("tool_selection", pa.list_(pa.string())), ("tools_kwargs", pa.json_())]
    return pa.schema([
        ("data_source", pa.string()), ("prompt", CHAT), ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", pa.struct(extra)), ("agent_name", pa.string())])


def _has_documents(root, dataset: str) -> bool:
    return bool(reader.entries(root, dataset, "documents"))


def corpus_of(root, dataset: str) -> str:
    """The dataset whose documents `dataset`'s tools search: itself when it has documents; else
    the input (or --corpus) of the run that wrote its rows (a validate run keeps its record
    beside its input and writes what it accepts to `<input>_valid`); else the name without
    `_valid`."""
    if _has_documents(root, dataset):
        return dataset
    run_ids = sorted({e.run_id for e in reader.entries(root, dataset)})
    for other in manifest.datasets(root):
        for run_id in run_ids:
            path = runs_dir(root, other) / f"{run_id}.json"
            config = json.loads(path.read_text()).get("config", {}) if path.exists() else {}
            for part in (p for p in config.values() if isinstance(p, dict)):
                source = part.get("corpus") or part.get("dataset")
                if isinstance(source, str) and source != dataset and _has_documents(root, source):
                    return source
    if dataset.endswith("_valid") and _has_documents(root, dataset[:-len("_valid")]):
        return dataset[:-len("_valid")]
    raise ValueError(f"dataset {dataset!r} has no documents and no run that wrote it names a dataset that has; "
                     "pass --corpus DATASET")


def _tool_rows(root, corpus: str, names: set[str]) -> list[dict]:
    """The `tools` rows of `corpus` for the offered names (the simulator needs their domain)."""
    table = reader.load_table(corpus, "tools", root) if reader.entries(root, corpus, "tools") else None
    rows = {r["name"]: r for r in table.drop_columns([c for c in SHARED_COLUMNS if c in table.schema.names])
            .to_pylist()} if table is not None else {}
    for r in base_rows() + [calculator_row()]:
        rows.setdefault(r["name"], r)
    missing = sorted(names - set(rows))
    if missing:
        raise ValueError(f"tools {', '.join(missing[:5])} are offered by the trajectories but not in dataset "
                         f"{corpus!r}'s tools; pass --corpus with the dataset they were synthesized with")
    return [rows[n] for n in sorted(names)]


class Offered:
    """The tools the exported tool rows offer: one OpenAI function dict per name, sorted;
    `tools()` raises when a name came with two schemas."""

    def __init__(self):
        self.seen: dict[str, dict] = {}
        self.conflict: str | None = None

    def add(self, item: Item) -> None:
        for t in openai_tools(item.tools):
            name = t["function"]["name"]
            if self.seen.setdefault(name, t) != t and self.conflict is None:
                self.conflict = name

    def tools(self) -> list[dict]:
        if self.conflict is not None:
            raise ValueError(f"tool {self.conflict!r} is offered with two different schemas; export one bank at a time")
        return [self.seen[n] for n in sorted(self.seen)]


def _prompt(i: Item, tools_in: str) -> list[dict]:
    if tools_in != "template":
        return i.prompt
    return [{**m, "content": _TOOLS_BLOCK.sub("", m["content"], count=1)} if m["role"] == "system" else m
            for m in i.prompt]


def verl_row(i: Item, dataset: str, split: str, index: int, tool_names: list[str], tools_in: str = "",
             labels: Labels | None = None) -> dict:
    tool_use, labels = i.kind == "trajectories", labels or Labels()
    extra = {"split": split, "index": index, "id": i.id, "kind": i.kind, "question": i.question, "answer": i.answer,
             "aliases": i.aliases, "hop_count": i.hop_count, "qtype": i.qtype, "need_tools_kwargs": tool_use,
             "label": labels.bought.get(i.triple_id or i.id) or "", "vote_weight": labels.vote_weight,
             "format_weight": labels.format_weight, "label_reward": labels.reward}
    if tool_names:
        offered = [t["function"]["name"] for t in openai_tools(i.tools)] if tool_use else []
        seed = int(json.loads(i.meta or "{}").get("seed") or 0) if tool_use else 0
        kwargs = {"create_kwargs": {"golden_doc_ids": i.golden_doc_ids, "seed": seed}}
        extra["tool_selection"] = offered or None
        extra["tools_kwargs"] = json.dumps({n: kwargs for n in offered}) if offered else None
    return {"data_source": f"forgeplay/{dataset}/{i.qtype or i.kind}", "prompt": _prompt(i, tools_in) if tool_use else i.prompt,
            "ability": "tool_use" if tool_use else "multihop_qa",
            "reward_model": {"style": "rule", "ground_truth": i.answer}, "extra_info": extra,
            "agent_name": "tool_agent" if tool_use else "single_turn_agent"}


def export_verl(dataset: str, out_dir, root=None, kinds=EXPORT_KINDS, test_fraction: float = 0.05,
                skip_rejected: bool = True, tool_agent: bool = False, tokenizer: str | Path | None = None,
                corpus: str | None = None, labels: Labels | None = None) -> VerlExport:
    """Write the files of the module docstring to out_dir; see VerlExport for what is returned.
    Streams (train/export.py): a first pass over the records decides which prompts repeat,
    the splits, the offered tools and the golden documents; a second writes the rows, one
    ability group after the other, chunk by chunk."""
    root = manifest.resolve_root(root)
    out = Path(out_dir)
    source = Source(dataset, root, kinds, skip_rejected)
    prompts, kept, split, offered = Prompts(), Places(), Split(test_fraction), Offered()
    groups: dict[bool, list[str]] = {}  # tool use or not -> its kinds, in the order rows are written
    tool_rows, golden = 0, set()
    for place, i in source.all(head=True):
        if not prompts.first(i):
            continue
        tool_use = i.kind == "trajectories"
        tool_rows += tool_use
        if tool_use and not tool_agent:
            continue
        if tool_use:
            offered.add(i)
            golden.update(i.golden_doc_ids)
        kept.add(place)
        split.see(i.id, place, tool_use)
        groups.setdefault(tool_use, [])
        if i.kind not in groups[tool_use]:
            groups[tool_use].append(i.kind)
    split.done()
    result = VerlExport({}, left_out=0 if tool_agent else tool_rows)
    try:
        tok = prompt_lengths.load_tokenizer(tokenizer)
        result.tokenizer = str(tok.name_or_path)
    except ValueError:
        if tool_agent or tokenizer is not None:
            raise
        tok = None  # plain QA rows: lengths are only reported
    tools = offered.tools()
    names = result.tool_names = [t["function"]["name"] for t in tools]
    if True in groups:
        result.corpus = _corpus(root, dataset, corpus, golden, source, kept)
        bank = _tool_rows(root, result.corpus, set(names))
        result.tools_in = "template" if prompt_lengths.renders_tools(tok) else "system"
    out.mkdir(parents=True, exist_ok=True)
    lengths, index = [], {"train": 0, "test": 0}
    count = prompt_lengths.Lengths(tok, tools if result.tools_in == "template" else None)
    with contextlib.ExitStack() as stack:
        files = {part: stack.enter_context(ParquetRows(out / f"{part}.parquet", verl_schema(names)))
                 for part in ("train", "test")}
        total = sum(map(sum, split.counts.values()))
        bar = stack.enter_context(tqdm(total=total, desc="verl rows", unit="row", disable=total < 500))
        for tool_use, group_kinds in groups.items():
            for kind in group_kinds:
                for pos, i in source.items(kind):
                    if (kind, pos) not in kept:
                        continue
                    part = split.of(i.id, (kind, pos), tool_use)
                    row = verl_row(i, dataset, part, index[part], names, result.tools_in, labels)
                    index[part] += 1
                    files[part].add(row)
                    if tok is not None:  # as verl's dataset filter counts them (with every tool's schema)
                        lengths.append(count(row["prompt"]))
                    bar.update()
    result.files = {f"{part}.parquet": files[part].count for part in ("train", "test")}
    if True in groups:
        verl_bundle.write_package(out, _documents(root, result.corpus), bank)
        verl_bundle.write_tool_config(out, tools)
        result.requirements = verl_bundle.requirements()
    else:
        verl_bundle.write_package(out)
        (out / "tool_config.yaml").unlink(missing_ok=True)  # an earlier export's
    verl_bundle.write_reward(out)
    if tok is not None:
        result.lengths = prompt_lengths.summary(lengths)
    write_text(out / "README.md", verl_readme.render(dataset, out.resolve(), result))
    return result


def _documents(root, name: str) -> Iterator[pa.Table]:
    """The corpus documents the tool package carries, chunk by chunk."""
    keep = ("doc_id", "title", "text", "meta")
    for t in reader.iter_tables(name, "documents", root, rows=CHUNK, columns=keep):
        yield t.select([c for c in keep if c in t.column_names])


def _corpus(root, dataset: str, corpus: str | None, golden: set[str], source: Source, kept: Places) -> str:
    """The corpus dataset; an error when it has no documents or lacks a golden document of a row."""
    name = corpus or corpus_of(root, dataset)
    if not _has_documents(root, name):
        raise ValueError(f"--corpus {name!r} has no documents under {root}")
    known = set()
    for t in reader.iter_tables(name, "documents", root, rows=50_000, columns=("doc_id",)):
        known.update(t.column("doc_id").to_pylist())
    if golden <= known:
        return name
    stray = [i.id for pos, i in source.items("trajectories", head=True)
             if ("trajectories", pos) in kept and not set(i.golden_doc_ids) <= known]
    raise ValueError(f"{len(stray)} tool rows (e.g. {stray[0]}) name golden documents that {name!r} lacks; "
                     "pass --corpus with the dataset they were synthesized from")
