"""Loaders over committed shards: an Arrow table, a Hugging Face `datasets.Dataset`, or the
plain list of Parquet files for `datasets.load_dataset("parquet", data_files=...)`.

Only shards listed in the manifest are read, less those `forgeplay verify` quarantined;
shards of different schema versions are unified by column name (columns a shard lacks read
as null). A listed shard that is gone when it is opened was replaced by a compaction
(storage/compact.py): the loaders read the manifest again and carry on (`iter_tables` from
the row it had reached: compaction keeps the order), so they give the rows of the old
shards or of the new ones, never both.

    from storage import load_table, load_hf, data_files
    table = load_table("demo", "trajectories")            # pyarrow.Table
    for t in iter_tables("demo", "trajectories", rows=2000): ...   # the same rows, chunk by chunk
    for t in prefetched(iter_tables(...)): ...            # the next chunk read while this one is used
    ds = load_hf("demo", "trajectories")                  # datasets.Dataset
    bad = rejected_ids("demo", "trajectories")            # ids that failed validation
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Iterator, Sequence, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from storage import manifest

T = TypeVar("T")
RETRIES = 5  # manifest reads a loader tries when listed shards are gone (compactions meanwhile)


def entries(root, dataset: str, kind: str | None = None, run_id: str | None = None) -> list[manifest.Entry]:
    ddir = manifest.dataset_dir(manifest.resolve_root(root), dataset)
    bad = manifest.quarantined(ddir)
    return [e for e in manifest.read(ddir) if e.path not in bad
            and (kind is None or e.kind == kind) and (run_id is None or e.run_id == run_id)]


def data_files(dataset: str, kind: str, root=None, run_id: str | None = None) -> list[str]:
    """Absolute paths of the committed shards of (dataset, kind), in commit order (a
    compaction after this call may replace them: list them again when one is gone)."""
    ddir = manifest.dataset_dir(manifest.resolve_root(root), dataset)
    return [str(e.abspath(ddir)) for e in entries(root, dataset, kind, run_id)]


def load_table(dataset: str, kind: str, root=None, run_id: str | None = None,
               columns: list[str] | None = None) -> pa.Table:
    """All committed rows of (dataset, kind) as one Arrow table (schemas unified by name)."""
    ddir = manifest.dataset_dir(manifest.resolve_root(root), dataset)

    def read(listed: list[manifest.Entry]) -> pa.Table:
        tables = []
        for e in listed:
            with open(e.abspath(ddir), "rb") as f:  # (opened once: a compaction may remove it meanwhile)
                pf = pq.ParquetFile(f)
                names = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
                tables.append(pf.read(columns=names))  # only the asked columns a shard has
        return pa.concat_tables(tables, promote_options="default")

    listed = entries(root, dataset, kind, run_id)
    for attempt in range(RETRIES):
        if not listed:
            from storage.schema import load

            return load(kind).arrow.empty_table()
        try:
            return read(listed)
        except FileNotFoundError as e:
            listed = _listed_again(root, dataset, kind, run_id, listed, attempt, e)
    raise AssertionError("unreachable")


def _listed_again(root, dataset, kind, run_id, listed, attempt: int, error: OSError) -> list[manifest.Entry]:
    """The entries after a listed shard was found gone: the new listing when the manifest
    changed (a compaction), else `error` is raised."""
    again = entries(root, dataset, kind, run_id)
    if again == listed or attempt == RETRIES - 1:
        raise error
    return again


def iter_tables(dataset: str, kind: str, root=None, rows: int = 2000, drop: Sequence[str] = (),
                run_id: str | None = None, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
    """The rows `load_table` gives, as tables of `rows` rows each (the last may be shorter),
    in the same order and with the same unified schema but without the columns in `drop`
    (or with only `columns`), reading each shard batch by batch: memory stays at about one
    chunk and one row group whatever the dataset's size."""
    ddir = manifest.dataset_dir(manifest.resolve_root(root), dataset)
    listed, done = entries(root, dataset, kind, run_id), 0
    for attempt in range(RETRIES):
        try:
            for t in _chunks(ddir, listed, rows, drop, columns, skip=done):
                done += t.num_rows
                yield t
            return
        except FileNotFoundError as e:
            listed = _listed_again(root, dataset, kind, run_id, listed, attempt, e)


def _chunks(ddir: Path, listed: list[manifest.Entry], rows: int, drop: Sequence[str], columns, skip: int):
    """iter_tables over one listing, from row `skip` on."""
    if not listed:
        return
    schemas = [pq.read_schema(e.abspath(ddir)) for e in listed]
    unified = pa.unify_schemas(schemas, promote_options="default")
    unified = pa.schema([f for f in unified if f.name not in drop and (columns is None or f.name in columns)],
                        metadata=unified.metadata)
    buffer: list[pa.Table] = []
    held = 0
    for e, s in zip(listed, schemas):
        if skip >= e.rows:
            skip -= e.rows
            continue
        names = [c for c in unified.names if c in s.names]
        with open(e.abspath(ddir), "rb") as f:
            # pre_buffer keeps every range it read until the file closes: a 400 MB shard read
            # batch by batch would end up held whole
            for batch in pq.ParquetFile(f, pre_buffer=False).iter_batches(batch_size=rows, columns=names):
                if skip:
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    batch, skip = batch.slice(skip), 0
                t = pa.Table.from_batches([batch])
                buffer.append(pa.concat_tables([unified.empty_table(), t], promote_options="default"))
                held += t.num_rows
                while held >= rows:
                    whole = pa.concat_tables(buffer)
                    yield whole.slice(0, rows)
                    buffer, held = [whole.slice(rows)], held - rows
    if held:
        yield pa.concat_tables(buffer)


_END = object()


def prefetched(items: Iterable[T]) -> Iterator[T]:
    """`items` with the next one read ahead on a thread while the caller works on the
    current one: for readers that spend their time in native code that frees the
    interpreter lock (Parquet decoding), next to a caller busy in Python. The same items in
    the same order; a reader's error is raised at its item."""
    it = iter(items)
    with ThreadPoolExecutor(1, thread_name_prefix="prefetch") as pool:
        ahead = pool.submit(next, it, _END)
        while (item := ahead.result()) is not _END:
            ahead = pool.submit(next, it, _END)
            yield item


def load_hf(dataset: str, kind: str, root=None, run_id: str | None = None):
    """The same rows as a `datasets.Dataset` (in memory, Arrow-backed)."""
    import datasets

    return datasets.Dataset(load_table(dataset, kind, root, run_id))


def rejected_ids(dataset: str, kind: str, root=None) -> set[str]:
    """Ids of the `kind` records of `dataset` that failed validation: any committed verdict
    about them did not pass (the one rule SFT, GRPO data and every exporter use)."""
    import pyarrow.compute as pc

    out: set[str] = set()
    for v in iter_tables(dataset, "verdicts", root, rows=200_000, columns=("record_id", "record_kind", "passed")):
        failed = pc.and_(pc.equal(v["record_kind"], kind), pc.equal(v["passed"], False))
        out.update(pc.unique(v.filter(failed)["record_id"]).to_pylist())
    return out


def kinds(root, dataset: str) -> list[str]:
    return sorted({e.kind for e in entries(root, dataset)})


def summary(root) -> list[dict]:
    """One row per (dataset, kind, run): shards and rows, from the manifests."""
    root = manifest.resolve_root(root)
    out: dict[tuple, dict] = {}
    for ds in manifest.datasets(root):
        for e in manifest.read(Path(root) / ds):
            key = (ds, e.kind, e.run_id)
            row = out.setdefault(key, {"dataset": ds, "kind": e.kind, "run_id": e.run_id,
                                       "shards": 0, "rows": 0, "bytes": 0,
                                       "schema_versions": set(), "last_commit": e.committed_at})
            row["shards"] += 1
            row["rows"] += e.rows
            row["bytes"] += e.bytes
            row["schema_versions"].add(e.schema_version)
            row["last_commit"] = max(row["last_commit"], e.committed_at)
    for row in out.values():
        row["schema_versions"] = ",".join(str(v) for v in sorted(row["schema_versions"]))
    return list(out.values())


def require_rows(root, dataset: str, kinds: str | Sequence[str], option: str = "--dataset") -> int:
    """The committed rows of `dataset` of `kinds` (one kind, or any of several), as a command
    checks its options before it loads a model or starts a server: a one-line ValueError
    naming `option` when the name is not a dataset name, no such dataset is under the root
    (with the closest names there) or it has no rows of these kinds (with the kinds it has)."""
    import difflib
    from collections import Counter

    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    root = manifest.resolve_root(root)
    try:
        manifest.check_name("dataset name", dataset)
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None
    missing = f"{option} {dataset!r} has no {' or '.join(kinds)} rows under {root}"
    known = manifest.datasets(root)
    if dataset not in known:
        close = difflib.get_close_matches(dataset, known, n=3)
        hint = f"did you mean {' or '.join(close)}?" if close else f"datasets there: {', '.join(known[:12]) or 'none'}"
        raise ValueError(f"{missing}: no dataset of that name ({hint})")
    rows: Counter = Counter()
    for e in entries(root, dataset):
        rows[e.kind] += e.rows
    n = sum(rows[k] for k in kinds)
    if not n:
        raise ValueError(f"{missing} (it has {', '.join(f'{k} ({v})' for k, v in sorted(rows.items()) if v) or 'none'})")
    return n
