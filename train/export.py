"""Export committed shards to Parquet files that verl's RL trainer and TRL's GRPO/SFT trainers
read as they are. This is the way to train past one machine. This module holds what both
exporters share and the TRL exporter; the verl one is train/verl_export.py.

    forgeplay export verl --dataset demo --out exports/verl      # train.parquet, test.parquet, README.md, ...
    forgeplay export trl  --dataset demo --out exports/trl       # grpo_{train,test}.parquet, sft_{train,test}.parquet

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
Exports stream: the source is read chunk by chunk twice (`Source`: once to decide the
splits and which prompts repeat, once to write the rows with pyarrow's ParquetWriter,
`ParquetRows`), so memory does not grow with the dataset beyond a bit per record and a
16-byte hash per distinct prompt. Tests: tests/train/test_export.py, test_export_memory.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage import manifest, reader
from storage.files import atomic_path

EXPORT_KINDS = ("triples", "tasks", "trajectories")
CHUNK = 2000  # rows read, and rows written, at a time
GROUP_BYTES = 4 << 20  # an output row group is written once its rows take this much memory as Arrow
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
    triple_id: str = ""  # the triple a question came from (a label bought for it is keyed by it)


def openai_tools(tools: list[dict]) -> list[dict]:
    out = []
    for t in tools:
        params = t.get("parameters") or "{}"
        params = json.loads(params) if isinstance(params, str) else params
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                     "parameters": params}})
    return out


def _item(kind: str, r: dict) -> Item | None:
    """The Item of one committed row (None: a task without an answer)."""
    qa_prompt = [{"role": "system", "content": QA_SYSTEM}, {"role": "user", "content": r.get("question") or ""}]
    if kind == "triples":
        return Item(r["triple_id"], kind, r["question"], r["answer"], list(r.get("aliases") or []),
                    int(r["hop_count"]), r.get("qtype") or "", qa_prompt,
                    golden_doc_ids=list(r.get("golden_doc_ids") or []), meta=r.get("meta") or "", triple_id=r["triple_id"])
    if kind == "tasks":
        if not r.get("answer"):
            return None
        docs = [d for h in ((r.get("qcp") or {}).get("hops") or []) for d in h.get("doc_ids") or []]
        return Item(r["task_id"], kind, r["question"], r["answer"], list(r.get("aliases") or []),
                    int(r["hop_count"]), "selfplay", qa_prompt, golden_doc_ids=docs, meta=r.get("meta") or "")
    if kind == "trajectories":
        meta = json.loads(r.get("meta") or "{}")
        msgs = [{"role": m["role"], "content": m["content"]} for m in r["messages"]]
        user = next((m["content"] for m in msgs if m["role"] == "user"), r.get("question") or "")
        prompt = [m for m in msgs[:2] if m["role"] in ("system", "user")]
        return Item(r["traj_id"], kind, r.get("question") or user, r["answer"], list(meta.get("aliases") or []),
                    int(meta.get("hop_count") or 1), meta.get("qtype") or "", prompt,
                    tools=list(r.get("tools") or []), golden_doc_ids=list(meta.get("golden_doc_ids") or []),
                    meta=r.get("meta") or "", messages=msgs, route=r.get("route") or "", case=r.get("case") or "",
                    triple_id=r.get("triple_id") or "")
    raise ValueError(f"cannot export kind {kind!r}; choose from {', '.join(EXPORT_KINDS)}")


class Source:
    """The exportable records of a dataset, read chunk by chunk as often as an exporter
    needs (`items(kind)`: (position in the kind, Item), rejected ones left out). With
    `head`, a trajectory's Item carries only its first two messages: what the prompt is made
    of (an exporter's first pass reads less)."""

    def __init__(self, dataset: str, root=None, kinds=EXPORT_KINDS, skip_rejected: bool = True):
        self.root = manifest.resolve_root(root)
        if dataset not in manifest.datasets(self.root):
            raise ValueError(f"no dataset {dataset!r} under {self.root}")
        bad = [k for k in kinds if k not in EXPORT_KINDS]
        if bad:
            raise ValueError(f"cannot export kind {bad[0]!r}; choose from {', '.join(EXPORT_KINDS)}")
        present = set(reader.kinds(self.root, dataset))
        self.dataset, self.kinds = dataset, [k for k in dict.fromkeys(kinds) if k in present]
        self.skip_rejected = skip_rejected
        self._rejected: dict[str, set[str]] = {}

    def items(self, kind: str, head: bool = False) -> Iterator[tuple[int, Item]]:
        if kind not in self._rejected:
            self._rejected[kind] = reader.rejected_ids(self.dataset, kind, self.root) if self.skip_rejected else set()
        bad, pos = self._rejected[kind], 0
        for table in reader.iter_tables(self.dataset, kind, self.root, rows=CHUNK):
            if head and kind == "trajectories":
                at = table.schema.get_field_index("messages")
                table = table.set_column(at, "messages", pc.list_slice(table.column("messages"), 0, 2))
            for r in table.to_pylist():
                item = None if r["id"] in bad else _item(kind, r)
                if item is not None:
                    yield pos, item
                    pos += 1

    def all(self, head: bool = False) -> Iterator[tuple[tuple[str, int], Item]]:
        """Every item, in kind order: ((kind, position), Item)."""
        for kind in self.kinds:
            for pos, item in self.items(kind, head):
                yield (kind, pos), item


def split_of(key: str, test_fraction: float) -> str:
    """'test' when the first 8 bytes of sha256(key), as a fraction of 2**64, are below test_fraction."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2 ** 64
    return "test" if h < test_fraction else "train"


class Split:
    """The train/test split of a stream of items without holding them: an item is in test
    when split_of(its id) says so; within each group (a label, e.g. tool use or not), when
    that leaves test empty but train has two or more items, the first train item with the
    smallest sha256(id) moves to test. `see` every item once, in order, with its place
    and label; after `done`, `of` gives each item's part."""

    def __init__(self, test_fraction: float):
        self.test_fraction = test_fraction
        self.counts: dict = {}  # label -> [train, test]
        self.smallest: dict = {}  # label -> (sha256 of the key, place) of the first smallest train item
        self.moved: dict = {}  # label -> place of the train item moved to an empty test part

    def see(self, key: str, place, label=None) -> None:
        digest = hashlib.sha256(key.encode()).digest()
        part = self._part(digest)
        self.counts.setdefault(label, [0, 0])[part == "test"] += 1
        if part == "train" and (label not in self.smallest or digest < self.smallest[label][0]):
            self.smallest[label] = (digest, place)

    def done(self) -> "Split":
        """After every `see`: which items move."""
        self.moved = {label: self.smallest[label][1] for label, (train, test) in self.counts.items()
                      if self.test_fraction > 0 and not test and train > 1}
        return self

    def of(self, key: str, place, label=None) -> str:
        if self.moved.get(label, ()) == place:
            return "test"
        return self._part(hashlib.sha256(key.encode()).digest())

    def _part(self, digest: bytes) -> str:
        return "test" if int.from_bytes(digest[:8], "big") / 2 ** 64 < self.test_fraction else "train"


class Prompts:
    """Items with a prompt seen before are left out: `first(item)` is True for the first item
    with its prompt (a 16-byte hash of the prompt is kept per distinct one, not the prompt)."""

    def __init__(self):
        self.seen: set[bytes] = set()

    def first(self, item: Item) -> bool:
        h = hashlib.blake2b(json.dumps(item.prompt, sort_keys=True).encode(), digest_size=16).digest()
        if h in self.seen:
            return False
        self.seen.add(h)
        return True


class Places:
    """A set of (kind, position) places, one bit each."""

    def __init__(self):
        self.bits: dict[str, bytearray] = {}

    def add(self, place: tuple[str, int]) -> None:
        bits = self.bits.setdefault(place[0], bytearray())
        byte = place[1] >> 3
        if byte >= len(bits):
            bits.extend(bytes(max(byte + 1 - len(bits), len(bits))))
        bits[byte] |= 1 << (place[1] & 7)

    def __contains__(self, place: tuple[str, int]) -> bool:
        bits = self.bits.get(place[0], b"")
        byte = place[1] >> 3
        return byte < len(bits) and bool(bits[byte] >> (place[1] & 7) & 1)


def storage_type(t: pa.DataType) -> pa.DataType:
    """`t` with every extension type (the JSON type, pa.json_()) replaced by its storage type,
    inside structs and lists too: what Python rows are converted to before a cast to `t`."""
    if isinstance(t, pa.BaseExtensionType):
        return t.storage_type
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(storage_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(storage_type(t.value_type)))
    return t


class ParquetRows:
    """Rows (dicts) written to a Parquet file with pyarrow's ParquetWriter, a row group per
    CHUNK rows or GROUP_BYTES (held as Arrow, converted 256 rows at a time); the file appears
    whole under its name when the `with` block ends without error. A column of the JSON type
    (pa.json_(), Parquet's JSON logical type) takes its rows' JSON text."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path, self.schema, self.count = Path(path), schema, 0
        self.storage = pa.schema([f.with_type(storage_type(f.type)) for f in schema], metadata=schema.metadata)
        self.cast = not self.storage.equals(schema)  # rows are converted to the storage types, then cast
        self.rows: list[dict] = []
        self.batches: list[pa.RecordBatch] = []

    def __enter__(self) -> "ParquetRows":
        self._atomic = atomic_path(self.path)
        self._writer = pq.ParquetWriter(self._atomic.__enter__(), self.schema)
        return self

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.count += 1
        if len(self.rows) >= 256:
            self.batches.append(self._batch())
            self.rows = []
            if sum(b.num_rows for b in self.batches) >= CHUNK or sum(b.nbytes for b in self.batches) >= GROUP_BYTES:
                self._flush()

    def _batch(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pylist(self.rows, schema=self.storage)
        return batch.cast(self.schema) if self.cast else batch

    def _flush(self) -> None:
        if self.rows:
            self.batches.append(self._batch())
            self.rows = []
        if self.batches:
            self._writer.write_table(pa.Table.from_batches(self.batches, schema=self.schema))
            self.batches = []

    def __exit__(self, *exc) -> bool | None:
        try:
            if exc[0] is None:
                self._flush()
        finally:
            self._writer.close()
        return self._atomic.__exit__(*exc)


def export_trl(dataset: str, out_dir, root=None, kinds=EXPORT_KINDS, test_fraction: float = 0.05,
               skip_rejected: bool = True) -> dict[str, int]:
    """Write grpo_{train,test}.parquet (all kinds) and sft_{train,test}.parquet (trajectories).
    Streams: one pass decides the splits (train/test by id hash; see split_items), a second
    writes the rows chunk by chunk."""
    source = Source(dataset, root, kinds, skip_rejected)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    grpo, sft, prompts, kept = Split(test_fraction), Split(test_fraction), Prompts(), Places()
    for place, i in source.all(head=True):
        if prompts.first(i):
            kept.add(place)
            grpo.see(i.id, place)
        if i.messages:
            sft.see(i.id, place)
    grpo.done(), sft.done()
    names = [f"{kind}_{split}.parquet" for kind in ("grpo", "sft") for split in ("train", "test")]
    with contextlib.ExitStack() as stack:
        files = {n: stack.enter_context(ParquetRows(out / n, GRPO_SCHEMA if n.startswith("grpo") else SFT_SCHEMA))
                 for n in names}
        for place, i in source.all():
            if place in kept:
                files[f"grpo_{grpo.of(i.id, place)}.parquet"].add(
                    {"prompt": i.prompt, "answer": i.answer, "aliases": i.aliases, "hop_count": i.hop_count,
                     "qtype": i.qtype, "data_source": f"forgeplay/{dataset}/{i.qtype or i.kind}",
                     "ability": "tool_use" if i.kind == "trajectories" else "multihop_qa", "id": i.id})
            if i.messages:
                files[f"sft_{sft.of(i.id, place)}.parquet"].add(
                    {"messages": i.messages, "id": i.id, "route": i.route, "case": i.case})
    counts = {n: files[n].count for n in names}
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
