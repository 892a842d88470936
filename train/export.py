"""Export committed shards to Parquet files that verl's RL trainer and TRL's GRPO/SFT trainers
read as they are. This is the way to train past one machine. This module holds what both
exporters share and the TRL exporter; the verl one is train/verl_export.py.

    forgeplay export verl --data demo --out exports/verl      # train.parquet, test.parquet, README.md, ...
    forgeplay export trl  --data demo --out exports/trl       # grpo_{train,test}.parquet, sft_{train,test}.parquet

Sources: `triples` and `tasks` (a question with a gold answer -> an RL prompt) and
`trajectories` (a tool-use conversation -> an RL prompt with its tools, and an SFT example).
Records that failed validation (storage.reader.rejected_ids: a failed verdict about the
committed row) are left out.

TRL GRPO row: prompt [{role, content}] plus answer, aliases, hop_count, qtype, data_source,
ability, id (every extra column reaches TRL reward functions as a keyword argument).
TRL SFT row: messages [{role, content}] of the whole trajectory; tool calls stay inside the
assistant text (Hermes `<tool_call>` blocks) and tool results are role "tool" messages (chat
templates without a tool role render them as their own turn).

The split is deterministic: a row is in test when sha256(id) falls under `test_fraction`.
Tests: tests/train/test_export.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from storage import manifest, reader
from storage.files import atomic_path

KINDS = ("triples", "tasks", "trajectories")
QA_SYSTEM = ("Answer the user's question. Reason step by step inside <think></think>, then give only the "
             "final short answer inside <answer></answer>.")

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
CHAT = pa.list_(MESSAGE)
GRPO_SCHEMA = pa.schema([
    ("prompt", CHAT), ("answer", pa.string()), ("aliases", pa.list_(pa.string())),
    ("hop_count", pa.int64()), ("qtype", pa.string()), ("data_source", pa.string()),
    ("ability", pa.string()), ("id", pa.string())])
SFT_SCHEMA = pa.schema([("messages", CHAT), ("id", pa.string()), ("route", pa.string()),
                        ("case", pa.string())])


@dataclass
class Item:
    """One source record, reduced to what every exporter needs."""

    id: str
    kind: str
    question: str
    answer: str
    aliases: list[str]
    hop_count: int
    qtype: str
    prompt: list[dict]
    tools: list[dict] = field(default_factory=list)
    golden_doc_ids: list[str] = field(default_factory=list)
    meta: str = ""
    messages: list[dict] | None = None
    route: str = ""
    case: str = ""


def openai_tools(tools: list[dict]) -> list[dict]:
    out = []
    for t in tools:
        params = t.get("parameters") or "{}"
        params = json.loads(params) if isinstance(params, str) else params
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                     "parameters": params}})
    return out


def _items(root, dataset: str, kind: str, skip_rejected: bool) -> list[Item]:
    rows = reader.load_table(dataset, kind, root).to_pylist()
    bad = reader.rejected_ids(dataset, kind, root) if skip_rejected else set()
    out = []
    for r in (r for r in rows if r["id"] not in bad):
        qa_prompt = [{"role": "system", "content": QA_SYSTEM}, {"role": "user", "content": r.get("question") or ""}]
        if kind == "triples":
            out.append(Item(r["triple_id"], kind, r["question"], r["answer"], list(r.get("aliases") or []),
                            int(r["hop_count"]), r.get("qtype") or "", qa_prompt,
                            golden_doc_ids=list(r.get("golden_doc_ids") or []), meta=r.get("meta") or ""))
        elif kind == "tasks":
            if not r.get("answer"):
                continue
            docs = [d for h in ((r.get("qcp") or {}).get("hops") or []) for d in h.get("doc_ids") or []]
            out.append(Item(r["task_id"], kind, r["question"], r["answer"], list(r.get("aliases") or []),
                            int(r["hop_count"]), "selfplay", qa_prompt, golden_doc_ids=docs, meta=r.get("meta") or ""))
        elif kind == "trajectories":
            meta = json.loads(r.get("meta") or "{}")
            msgs = [{"role": m["role"], "content": m["content"]} for m in r["messages"]]
            user = next((m["content"] for m in msgs if m["role"] == "user"), r.get("question") or "")
            prompt = [m for m in msgs[:2] if m["role"] in ("system", "user")]
            out.append(Item(r["traj_id"], kind, r.get("question") or user, r["answer"], list(meta.get("aliases") or []),
                            int(meta.get("hop_count") or 1), meta.get("qtype") or "", prompt,
                            tools=list(r.get("tools") or []), golden_doc_ids=list(meta.get("golden_doc_ids") or []),
                            meta=r.get("meta") or "", messages=msgs, route=r.get("route") or "",
                            case=r.get("case") or ""))
        else:
            raise ValueError(f"cannot export kind {kind!r}; choose from {', '.join(KINDS)}")
    return out


def load_items(dataset: str, root=None, kinds=KINDS, skip_rejected: bool = True) -> list[Item]:
    """All exportable records of `dataset`, in kind order, without rejected ones."""
    root = manifest.resolve_root(root)
    if dataset not in manifest.datasets(root):
        raise ValueError(f"no dataset {dataset!r} under {root}")
    present = set(reader.kinds(root, dataset))
    items = []
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"cannot export kind {kind!r}; choose from {', '.join(KINDS)}")
        if kind in present:
            items.extend(_items(root, dataset, kind, skip_rejected))
    return items


def split_of(key: str, test_fraction: float) -> str:
    """'test' when the first 8 bytes of sha256(key), as a fraction of 2**64, are below test_fraction."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2 ** 64
    return "test" if h < test_fraction else "train"


def split_items(items: list[Item], test_fraction: float, key=lambda i: i.id, group=None) -> dict[str, list[Item]]:
    """train/test by key hash; with `group` (item -> label), each group is split on its own."""
    if group is not None:
        parts: dict[str, list[Item]] = {"train": [], "test": []}
        for label in dict.fromkeys(group(i) for i in items):
            for name, part in split_items([i for i in items if group(i) == label], test_fraction, key).items():
                parts[name] += part
        return parts
    parts = {"train": [], "test": []}
    for i in items:
        parts[split_of(key(i), test_fraction)].append(i)
    if test_fraction > 0 and not parts["test"] and len(parts["train"]) > 1:
        # keep a non-empty test file: move the row with the smallest hash
        first = min(parts["train"], key=lambda i: hashlib.sha256(key(i).encode()).digest())
        parts["train"].remove(first)
        parts["test"].append(first)
    return parts


def dedupe_prompts(items: list[Item]) -> list[Item]:
    seen, out = set(), []
    for i in items:
        k = json.dumps(i.prompt, sort_keys=True)
        if k not in seen:
            seen.add(k)
            out.append(i)
    return out


def write_parquet(rows: list[dict], schema: pa.Schema, path: Path) -> int:
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    return len(rows)


def export_trl(dataset: str, out_dir, root=None, kinds=KINDS, test_fraction: float = 0.05,
               skip_rejected: bool = True) -> dict[str, int]:
    """Write grpo_{train,test}.parquet (all kinds) and sft_{train,test}.parquet (trajectories)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    items = load_items(dataset, root, kinds, skip_rejected)
    counts = {}
    for split, part in split_items(dedupe_prompts(items), test_fraction).items():
        rows = [{"prompt": i.prompt, "answer": i.answer, "aliases": i.aliases, "hop_count": i.hop_count,
                 "qtype": i.qtype, "data_source": f"forgeplay/{dataset}/{i.qtype or i.kind}",
                 "ability": "tool_use" if i.kind == "trajectories" else "multihop_qa", "id": i.id} for i in part]
        counts[f"grpo_{split}.parquet"] = write_parquet(rows, GRPO_SCHEMA, out / f"grpo_{split}.parquet")
    convs = [i for i in items if i.messages]
    for split, part in split_items(convs, test_fraction).items():
        rows = [{"messages": i.messages, "id": i.id, "route": i.route, "case": i.case} for i in part]
        counts[f"sft_{split}.parquet"] = write_parquet(rows, SFT_SCHEMA, out / f"sft_{split}.parquet")
    write_readme(out, dataset, counts)
    return counts


_TRL_README = """# forgeplay export of `{dataset}` for TRL

Files: {files}

GRPO (`prompt` is a chat list; answer, aliases, hop_count, ... reach reward functions as kwargs):
```python
from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer
from train.reward import answer_reward
ds = load_dataset("parquet", data_files={{"train": "{out}/grpo_train.parquet", "test": "{out}/grpo_test.parquet"}})
trainer = GRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", reward_funcs=answer_reward,
                      args=GRPOConfig(output_dir="grpo-out", num_generations=4, use_cpu=True),
                      train_dataset=ds["train"])
trainer.train()
```
SFT (`messages` is the whole tool-use conversation; tool results are role "tool"):
```python
from trl import SFTConfig, SFTTrainer
ds = load_dataset("parquet", data_files={{"train": "{out}/sft_train.parquet"}})
SFTTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", train_dataset=ds["train"],
           args=SFTConfig(output_dir="sft-out", use_cpu=True)).train()
```
"""


def write_readme(out: Path, dataset: str, counts: dict[str, int]) -> None:
    files = ", ".join(f"{k} ({v} rows)" for k, v in counts.items())
    (out / "README.md").write_text(_TRL_README.format(dataset=dataset, files=files, out=out.resolve()))
