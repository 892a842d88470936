"""Compaction: a run's many small shards rewritten into few large ones, with the same rows,
ids and order, under the commit protocol. `forgeplay compact` (flows/cli_compact.py) runs it
on a dataset; a writer runs it on its own run past a shard count (automatic, below).

    compact("data", "demo")                                              # every kind and run
    compact("data", "demo", kind="trajectories", run_id="synth-1a2b", rows_per_shard=100_000)

What is merged: shards next to each other in their kind's commit order, of one run and one
schema version, none quarantined (storage/manifest.py QUARANTINE: left as they are); merged
in that order, each new shard takes the place of the first one it replaces in the manifest,
so every reader reads the same rows in the same order before and after.

How (a kill at any point leaves the old state, or the whole new one once the manifest is
swapped, never a mixture): each group's files are checked against their sha256 (a corrupt
shard is left for `verify`, never merged) and streamed, row group by row group, into a
hidden temp file (`.part-*.parquet.tmp`, as a writer's), fsynced. Then, under the dataset
lock: the manifest is read again (a group whose shards changed meanwhile is dropped), the
temp files are renamed into place (`part-<first part>-<hex>.parquet`, so names still sort in
row order), the new manifest (the new entries with their sizes and checksums) is written to
a temp file, fsynced and renamed over the old one, the folder fsynced; leftovers of killed
writers and compactions in those run folders go. Last, the replaced files are removed.

Readers that read the old manifest may find a file gone: storage/reader.py and
storage/catalog.py then read the manifest again and carry on (a reader streaming chunks
resumes at its row: the order is the same), so they see the old shards or the new ones,
never both and never none.

Automatic: after each commit a writer calls `after_commit`; when its run holds more than
`auto_limit()` small shards (fewer than ROWS_PER_SHARD / 2 rows; 64 unless
$FORGEPLAY_COMPACT_SHARDS says otherwise, 0 turns it off) the run is compacted in that
process, size-tiered (`tiered`): the newest shards of about one size are merged once FANOUT
of them are there, so a row is rewritten a few times (about 4 for a million rows committed
32 at a time) and a run keeps about the limit of shards.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from storage import manifest
from storage.files import fsync_dir
from storage.runstate import RunState, part_number
from storage.temp_shard import TempShard

ROWS_PER_SHARD = 250_000  # a compacted shard's rows at most (the writer's default shard size)
ROW_GROUP = 50_000  # rows per row group of a compacted shard (as the writer's)
AUTO_LIMIT = 64  # small shards a run may hold before a writer compacts it
AUTO_ENV = "FORGEPLAY_COMPACT_SHARDS"
FANOUT = 8  # automatic compaction merges shards of about one size once this many are there
TEMP_AGE_S = 3600  # a hidden temp file untouched this long is a killed writer's leftover


@dataclass
class Result:
    """What a compaction did."""

    shards_in: int = 0  # shards replaced
    shards_out: int = 0  # shards written in their place
    rows: int = 0  # rows they hold
    left: list[str] = field(default_factory=list)  # groups not merged, and why


def auto_limit() -> int:
    """Small shards a run may hold before its writer compacts it ($FORGEPLAY_COMPACT_SHARDS,
    default AUTO_LIMIT; 0 = never)."""
    raw = os.environ.get(AUTO_ENV, "").strip()
    if not raw:
        return AUTO_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"${AUTO_ENV} must be a whole number of shards (0 turns automatic compaction off), "
                         f"not {raw!r}")
    return value


# -- planning --------------------------------------------------------------------------------
def segments(entries: list[manifest.Entry], bad: set[str], kind: str | None = None,
             run_id: str | None = None) -> list[list[manifest.Entry]]:
    """The stretches of entries that may be merged: next to each other in their kind's
    commit order, one run, one schema version, none in `bad` (quarantined), of the asked
    kind and run."""
    out: list[list[manifest.Entry]] = []
    current: dict[str, list[manifest.Entry] | None] = {}
    for e in entries:
        if e.path in bad or (kind and e.kind != kind) or (run_id and e.run_id != run_id):
            current[e.kind] = None  # it stays where it is: nothing merges across it
            continue
        seg = current.get(e.kind)
        if seg and seg[-1].run_id == e.run_id and seg[-1].schema_version == e.schema_version:
            seg.append(e)
        else:
            current[e.kind] = [e]
            out.append(current[e.kind])
    return [s for s in out if len(s) > 1]


def pack(segment: list[manifest.Entry], rows: int) -> list[list[manifest.Entry]]:
    """Consecutive groups of at most `rows` rows (a shard that large on its own is a group of
    its own); every group of one is left as it is."""
    groups: list[list[manifest.Entry]] = []
    current: list[manifest.Entry] = []
    total = 0
    for e in segment:
        if current and total + e.rows > rows:
            groups.append(current)
            current, total = [], 0
        current.append(e)
        total += e.rows
    if current:
        groups.append(current)
    return groups


def _level(rows: int) -> int:
    level = 0
    while rows >= FANOUT:
        rows //= FANOUT
        level += 1
    return level


def tiered(segment: list[manifest.Entry], rows: int) -> list[list[manifest.Entry]]:
    """Automatic compaction's groups: from the smallest size up, the newest shards of that
    size or smaller are merged once there are FANOUT of them and the largest is no bigger
    than the rest together (so a row's shard at least doubles each time it is rewritten);
    a group past `rows` is packed; shards of `rows` / 2 rows or more are never touched."""
    items: list[list[manifest.Entry]] = [[e] for e in segment]

    def size(item: list[manifest.Entry]) -> int:
        return sum(e.rows for e in item)

    for level in range(_level(rows) + 1):
        k = len(items)
        while k and size(items[k - 1]) < rows // 2 and _level(size(items[k - 1])) <= level:
            k -= 1
        sizes = [size(item) for item in items[k:]]
        if len(sizes) >= FANOUT and 2 * max(sizes) <= sum(sizes):
            items[k:] = pack([e for item in items[k:] for e in item], rows)
    return [g for g in items if len(g) > 1]


def plan(entries: list[manifest.Entry], bad: set[str], kind: str | None, run_id: str | None,
         group_by) -> list[list[manifest.Entry]]:
    return [g for seg in segments(entries, bad, kind, run_id) for g in group_by(seg) if len(g) > 1]


# -- running -------------------------------------------------------------------------------
def planned(root, dataset: str, kind: str | None = None, run_id: str | None = None,
            rows_per_shard: int = ROWS_PER_SHARD) -> tuple[Path, list[list[manifest.Entry]]]:
    """(the dataset's folder, the groups `compact` would merge): checks the arguments."""
    if rows_per_shard < 1:
        raise ValueError(f"rows per shard must be at least 1, not {rows_per_shard}")
    root = manifest.resolve_root(root)
    ddir = manifest.dataset_dir(root, dataset)
    if not (ddir / manifest.MANIFEST).is_file():
        known = ", ".join(manifest.datasets(root)) or "none"
        raise FileNotFoundError(f"no dataset {dataset!r} under {root} (datasets there: {known})")
    groups = plan(manifest.read(ddir), manifest.quarantined(ddir), kind, run_id,
                  lambda seg: pack(seg, rows_per_shard))
    return ddir, groups


def compact(root, dataset: str, kind: str | None = None, run_id: str | None = None,
            rows_per_shard: int = ROWS_PER_SHARD, progress=None) -> Result:
    """Merge the small shards of `dataset` (of one kind, one run) into shards of at most
    `rows_per_shard` rows (module docstring). `progress(rows)` is called after each group."""
    ddir, groups = planned(root, dataset, kind, run_id, rows_per_shard)
    return rewrite(ddir, groups, progress=progress, sweep=run_folders(ddir, kind, run_id))


def run_folders(ddir: Path, kind: str | None = None, run_id: str | None = None) -> set[Path]:
    """The run folders of the dataset's committed shards (of one kind, one run)."""
    return {e.abspath(ddir).parent for e in manifest.read(ddir)
            if (kind is None or e.kind == kind) and (run_id is None or e.run_id == run_id)}


def after_commit(state: RunState) -> Result | None:
    """A writer's hook after each commit: compact its run, size-tiered, once it holds more
    than `auto_limit()` small shards. A compaction that fails warns; the commit stands."""
    limit = auto_limit()
    if not limit or state.small(ROWS_PER_SHARD // 2) <= max(limit, state.compact_above):
        return None
    try:
        with state.lock:
            groups = plan(manifest.read(state.ddir), manifest.quarantined(state.ddir), state.kind, state.run_id,
                          lambda seg: tiered(seg, ROWS_PER_SHARD))
        result = rewrite(state.ddir, groups, state=state)
    except (OSError, pa.ArrowException) as e:
        warnings.warn(f"automatic compaction of {state.ddir.name}/{state.rel_run} failed, the run's shards are "
                      f"as they were: {e}", RuntimeWarning, stacklevel=2)
        result = None
    left = state.small(ROWS_PER_SHARD // 2)
    state.compact_above = 0 if left <= limit else left + limit  # no progress: try again much later
    return result


def rewrite(ddir: Path, groups: list[list[manifest.Entry]], state: RunState | None = None,
            progress=None, sweep: set[Path] = frozenset()) -> Result:
    """Replace each group of consecutive entries by one new shard (module docstring); the
    folders in `sweep` lose their leftovers (killed writers' and compactions') also when
    nothing is merged."""
    result, written = Result(), []
    try:
        for group in groups:
            out = _write_group(ddir, group, result)
            if out is not None:
                written.append((group, out))
            if progress:
                progress(sum(e.rows for e in group))
        if not written and not sweep:
            return result
        removed = _swap(ddir, written, result, state, set(sweep))
    finally:
        for _, (tmp, *_rest) in written:
            tmp.unlink(missing_ok=True)
    for path in removed:
        path.unlink(missing_ok=True)
    for folder in {p.parent for p in removed}:
        fsync_dir(folder)
    return result


def _write_group(ddir: Path, group: list[manifest.Entry], result: Result) -> tuple | None:
    """Stream the group's shards into one hidden temp file, fsynced: (path, bytes, sha256,
    rows), or None (noted in `result.left`) when a shard is corrupt or of another schema."""
    paths = [e.abspath(ddir) for e in group]
    for e, p in zip(group, paths):
        try:
            digest = manifest.file_sha256(p)
        except FileNotFoundError:  # another compaction replaced it meanwhile (or it is missing: verify says)
            result.left.append(f"{e.path}: gone")
            return None
        if digest != e.sha256:
            result.left.append(f"{e.path}: its checksum does not match the manifest (run `forgeplay verify`)")
            return None
    shard = None
    try:
        for p in paths:
            with open(p, "rb") as src:
                pf = pq.ParquetFile(src, pre_buffer=False)  # (read batch by batch: storage/reader.py)
                if shard is None:
                    shard = TempShard(paths[0].parent, pf.schema_arrow, ROW_GROUP)
                elif not pf.schema_arrow.equals(shard.schema, check_metadata=True):
                    result.left.append(f"{group[0].path} and the {len(group) - 1} after it: their Parquet "
                                       "schemas differ")
                    shard.discard()
                    return None
                for batch in pf.iter_batches(batch_size=ROW_GROUP):
                    shard.add(pa.Table.from_batches([batch], shard.schema))
        tmp, size, digest, _ = shard.finish()
        return tmp, size, digest, sum(e.rows for e in group)
    except BaseException as e:
        if shard is not None:
            shard.discard()
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(e.errno, f"no space left on the disk of {ddir} while compacting {group[0].path} and the "
                          f"{len(group) - 1} shards after it: nothing was changed; free space and rerun") from e
        raise


def _swap(ddir: Path, written: list, result: Result, state: RunState | None, sweep: set[Path]) -> list[Path]:
    """Under the dataset lock: rename the new shards into place and swap the manifest.
    Returns the files the new manifest no longer names (to remove): the replaced shards and
    the leftovers in their folders and in `sweep`."""
    with state.lock if state is not None else contextlib.nullcontext(), manifest.locked(ddir):
        current = manifest.read(ddir)
        present, bad = set(current), manifest.quarantined(ddir)
        first: dict[str, list[manifest.Entry]] = {}
        gone: set[str] = set()
        for group, (tmp, size, digest, rows) in written:
            if not all(e in present and e.path not in bad for e in group):
                result.left.append(f"{group[0].path} and the {len(group) - 1} after it changed meanwhile")
                continue
            base = part_number(group[0].path.rsplit("/", 1)[1])
            final = tmp.parent / f"part-{base if base is not None else 0:05d}-{uuid.uuid4().hex[:8]}.parquet"
            os.replace(tmp, final)
            first[group[0].path] = [manifest.Entry(
                kind=group[0].kind, run_id=group[0].run_id, path=str(final.relative_to(ddir)), rows=rows,
                bytes=size, sha256=digest, schema_version=group[0].schema_version,
                committed_at=max(e.committed_at for e in group))]
            gone.update(e.path for e in group)
            result.shards_in += len(group)
            result.shards_out += 1
            result.rows += rows
        folders = {(ddir / p).parent for p in gone}
        entries = current
        if first:
            for folder in folders:
                fsync_dir(folder)
            entries = [n for e in current if e.path not in gone or e.path in first for n in first.get(e.path, [e])]
            data = manifest.replace(ddir, entries)
            if state is not None:
                state.adopt(entries, data)
        listed = {e.path for e in entries} | gone
        leftovers = {p for folder in folders | sweep if folder.is_dir() for p in _leftovers(ddir, folder, listed)}
    return [ddir / p for p in sorted(gone)] + sorted(leftovers)


def _leftovers(ddir: Path, folder: Path, listed: set[str]) -> list[Path]:
    """Files in a run folder that no manifest line names (caller holds the dataset lock, so
    no commit is half done): shards of killed writers and compactions, and hidden temp
    files untouched for TEMP_AGE_S."""
    out = []
    now = time.time()
    for p in folder.iterdir():
        if part_number(p.name) is not None and str(p.relative_to(ddir)) not in listed:
            out.append(p)
        elif p.name.startswith(".part-") and p.name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                if now - p.stat().st_mtime > TEMP_AGE_S:
                    out.append(p)
    return out
