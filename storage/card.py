"""Dataset cards: `README.md` in a dataset's folder, with the YAML front matter Hugging Face
`datasets` reads, so `load_dataset("<root>/<dataset>", "<kind>")` loads the committed rows.

Front matter (built with `datasets`' and `huggingface_hub`'s own card classes): `configs`, one
per record kind, whose `data_files` globs match exactly that kind's committed shards (a run
folder holding an uncommitted leftover or a quarantined shard is listed file by file);
`dataset_info` per kind (features from the kind's Arrow schema, storage/schema.py; rows;
bytes as Parquet on disk and uncompressed); `source_datasets` (the datasets the kinds were
made from, read from the run records); `license`. The body says what each kind holds, how to
load it and where each run's rows came from (storage/lineage.py).

    write_card("data", "demo_valid")                 # data/demo_valid/README.md
    write_card("data", "demo", license="cc-by-4.0")
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from storage import manifest
from storage.manifest import quarantined
from storage.files import write_text
from storage.lineage import Lineage, lineage
from storage.schema import load as load_schema

CARD = "README.md"
PART_GLOB = "part-*.parquet"
DEFAULT_LICENSE = "other"


def kind_globs(ddir: Path, paths: list[str]) -> list[str]:
    """Patterns (relative to `ddir`) that match exactly the shard files `paths` of one kind:
    `<kind>/*/part-*.parquet` when every run folder on disk holds exactly its committed parts,
    else one pattern per clean run folder and the exact paths of the others."""
    by_dir: dict[str, set[str]] = defaultdict(set)
    for p in paths:
        folder, name = p.rsplit("/", 1)
        by_dir[folder].add(name)
    clean = {d for d, names in by_dir.items() if {f.name for f in (ddir / d).glob(PART_GLOB)} == names}
    kind = paths[0].split("/", 1)[0]
    on_disk = {str(f.parent.relative_to(ddir)) for f in (ddir / kind).glob(f"*/{PART_GLOB}")}
    if clean == set(by_dir) == on_disk and all(d.count("/") == 1 for d in by_dir):
        return [f"{kind}/*/{PART_GLOB}"]
    out = []
    for d, names in sorted(by_dir.items()):
        out += [f"{d}/{PART_GLOB}"] if d in clean else [f"{d}/{n}" for n in sorted(names)]
    return out


def _uncompressed(path: Path) -> int:
    meta = pq.read_metadata(path)
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def card_text(root, dataset: str, license: str | None = None) -> str:
    """The card of `dataset` (see the module docstring); FileNotFoundError when it has no
    committed shard."""
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard, DatasetCardData

    root = manifest.resolve_root(root)
    ddir = manifest.dataset_dir(root, dataset)
    bad = quarantined(ddir)
    usable = [e for e in manifest.read(ddir) if e.path not in bad and e.abspath(ddir).is_file()]
    if not usable:
        known = ", ".join(manifest.datasets(root)) or "none"
        raise FileNotFoundError(f"dataset {dataset!r} has no committed shards in {root} (datasets there: {known})")
    by_kind: dict[str, list[manifest.Entry]] = defaultdict(list)
    for e in usable:
        by_kind[e.kind].append(e)
    kinds = sorted(by_kind)
    default = "trajectories" if "trajectories" in by_kind else kinds[0]
    configs, infos = {}, {}
    for kind in kinds:
        es = by_kind[kind]
        configs[kind] = {"data_files": [{"split": "train", "path": kind_globs(ddir, [e.path for e in es])}],
                         **({"default": True} if kind == default else {})}
        rows, on_disk = sum(e.rows for e in es), sum(e.bytes for e in es)
        size = sum(_uncompressed(e.abspath(ddir)) for e in es)
        splits = SplitDict({"train": SplitInfo("train", num_bytes=size, num_examples=rows)})
        infos[kind] = DatasetInfo(features=Features.from_arrow_schema(load_schema(kind).arrow), splits=splits,
                                  download_size=on_disk, dataset_size=size)
    found = lineage(root, dataset, usable)
    data = DatasetCardData(license=license or found.license or DEFAULT_LICENSE, pretty_name=dataset,
                           source_datasets=found.sources() or None, tags=["forgeplay"])
    MetadataConfigs(configs).to_dataset_card_data(data)
    DatasetInfosDict(infos).to_dataset_card_data(data)
    body = _body(dataset, default, by_kind, found, sorted(bad))
    return str(DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body}"))


def _body(dataset: str, default: str, by_kind: dict, found: Lineage, quarantined: list[str]) -> str:
    lines = [f"# {dataset}", "",
             f"A forgeplay dataset: record kinds {', '.join(sorted(by_kind))} as Parquet shards, one config per kind. "
             "Only the shards committed to `_manifest.jsonl` (and not quarantined) are listed.", "",
             "| kind | what a row is | rows | shards | Parquet bytes |", "|---|---|---:|---:|---:|"]
    for kind, es in sorted(by_kind.items()):
        about = load_schema(kind).json.get("description", "")
        lines.append(f"| {kind} | {about} | {sum(e.rows for e in es)} | {len(es)} | {sum(e.bytes for e in es)} |")
    lines += ["", "## Loading", "", "```python", "from datasets import load_dataset", "",
              f'rows = load_dataset("path/to/{dataset}", "{default}", split="train")', "```", "",
              "## Lineage", "", "| kind | run | rows | made from | run record |", "|---|---|---:|---|---|"]
    for r in found.runs:
        lines.append(f"| {r.kind} | {r.run_id} | {r.rows} | {', '.join(r.sources) or '-'} | {r.record or '-'} |")
    if found.loops:
        lines += ["", "Made by loop runs (`<root>/runs/<run_id>/run.json`): "
                  + ", ".join(f"{run} as {role}" for run, role in found.loops) + "."]
    if quarantined:
        lines += ["", "Left out as corrupt (`forgeplay verify`): " + ", ".join(f"`{p}`" for p in quarantined) + "."]
    return "\n".join(lines) + "\n"


def write_card(root, dataset: str, license: str | None = None) -> Path:
    """Write `dataset`'s card to `<root>/<dataset>/README.md` atomically; its path."""
    text = card_text(root, dataset, license)
    return write_text(manifest.dataset_dir(manifest.resolve_root(root), dataset) / CARD, text)
