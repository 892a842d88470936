"""Read the files users bring (records as JSON Lines, a JSON array, or Parquet), one record
at a time, with the place of every bad record: the one reader behind `corpus import`,
`validate --input`, held-out files and `generate`'s prompts; `read_ids` reads a file of ids,
one per line, and `read_split` the test split of `synthesize --hold-out` and `train eval
--hold-out` (ids the dataset must hold).

Each record comes back as `RawRecord(where, record, error, raw_id, value, text)`: `where`
is "line N" (JSON Lines, 1-based), "index N" (JSON array, 0-based) or "row N" (Parquet,
0-based); a record that cannot be read has `error` set and `record` None, so callers can
report it and go on, with what was read instead: `value`, a decoded JSON value that is not
an object, or `text`, a JSON Lines line that is not JSON. JSON Lines and Parquet stream; a
JSON array is parsed element by element from a growing buffer, so memory stays near the
size of one element. Files ending in `.gz` are decompressed on the fly; bytes that are not
UTF-8 are replaced, never fatal.

    for rec in iter_records(Path("hotpot_dev.json")):
        ...
    rows = read_records(Path("prompts.jsonl"))     # ValueError "prompts.jsonl line 3: ..."
"""

from __future__ import annotations

import gzip
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

CONTAINERS = ("jsonl", "json_array", "parquet")
_ID_RE = re.compile(r'"_?id"\s*:\s*"?([^",}]*)')
CHUNK = 1 << 20


@dataclass
class RawRecord:
    where: str
    record: dict | None
    error: str | None = None
    raw_id: str | None = None
    value: Any = None  # a JSON value that is not an object
    text: str | None = None  # a line that is not JSON


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def detect_container(path: Path) -> str:
    """parquet by suffix; otherwise JSON array if the first non-space character is '[',
    else JSON Lines."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".parquet"):
        return "parquet"
    with _open_text(path) as f:
        while True:
            chunk = f.read(4096)
            if not chunk:
                return "jsonl"
            stripped = chunk.lstrip().lstrip("\ufeff")
            if stripped:
                return "json_array" if stripped[0] == "[" else "jsonl"


def record_id_of(record: dict | None, raw: str | None = None) -> str | None:
    """The record's `_id` (or `id`), also recovered from an unparseable line when possible."""
    if isinstance(record, dict):
        for key in ("_id", "id"):
            if record.get(key) is not None:
                return str(record[key])
        return None
    m = _ID_RE.search(raw or "")
    return m.group(1) if m else None


def _checked(where: str, obj) -> RawRecord:
    if not isinstance(obj, dict):
        return RawRecord(where, None, f"record is a JSON {type(obj).__name__}, not an object", value=obj)
    return RawRecord(where, obj, None, record_id_of(obj))


def iter_jsonl(f: IO[str]) -> Iterator[RawRecord]:
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            yield RawRecord(f"line {lineno}", None, f"invalid JSON: {e}", record_id_of(None, line),
                            text=line.rstrip("\r\n"))
            continue
        yield _checked(f"line {lineno}", obj)


def iter_json_array(f: IO[str], chunk: int = CHUNK) -> Iterator[RawRecord]:
    """Elements of a top-level JSON array, decoded one at a time."""
    dec = json.JSONDecoder()
    buf, pos, eof = "", 0, False

    def more() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        data = f.read(max(chunk, len(buf) - pos))
        if not data:
            eof = True
            return False
        buf, pos = buf[pos:] + data, 0
        return True

    def skip_ws() -> bool:
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n\ufeff":
                pos += 1
            if pos < len(buf) or not more():
                return pos < len(buf)

    if not skip_ws() or buf[pos] != "[":
        yield RawRecord("index 0", None, "not a JSON array")
        return
    pos += 1
    index = 0
    while True:
        if not skip_ws():
            yield RawRecord(f"index {index}", None, "invalid JSON: the array is not closed")
            return
        if buf[pos] == "]":
            return
        if index > 0:
            if buf[pos] != ",":
                yield RawRecord(f"index {index}", None, f"invalid JSON: expected ',' or ']' but found {buf[pos]!r}")
                return
            pos += 1
            skip_ws()
        while True:
            try:
                obj, end = dec.raw_decode(buf, pos)
            except ValueError as e:
                if more():
                    continue
                yield RawRecord(f"index {index}", None, f"invalid JSON: {e}; the rest of the array is unreadable",
                                record_id_of(None, buf[pos:pos + 2000]))
                return
            if end == len(buf) and more():
                continue  # a number or literal may continue in the next chunk
            break
        pos = end
        yield _checked(f"index {index}", obj)
        index += 1


def iter_parquet(path: Path, batch_size: int = 1000) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    row = 0
    for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=batch_size):  # (storage/reader.py)
        for rec in batch.to_pylist():
            yield _checked(f"row {row}", rec)
            row += 1


def iter_records(path: Path, container: str | None = None) -> Iterator[RawRecord]:
    container = container or detect_container(path)
    if container == "parquet":
        yield from iter_parquet(path)
        return
    with _open_text(path) as f:
        yield from (iter_json_array(f) if container == "json_array" else iter_jsonl(f))


def read_records(path: str | Path) -> list[dict]:
    """Every record of a user file; ValueError naming the file and the place of the first
    record that cannot be read (nothing is half-read)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    out = []
    for rec in iter_records(path):
        if rec.error:
            raise ValueError(f"{path} {rec.where}: {rec.error}")
        out.append(rec.record)
    return out


def read_ids(path: str | Path, option: str) -> list[str]:
    """The ids of a plain-text file, one per line (blank lines and lines starting with # are
    skipped), in the file's order without repeats; ValueError naming `option` when the file
    cannot be read or holds no id."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ValueError(f"{option} {str(path)!r} cannot be read: {e.strerror}") from None
    ids = [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith("#")]
    if not ids:
        raise ValueError(f"{option} {str(path)!r} holds no id (one per line)")
    return list(dict.fromkeys(ids))


def read_split(path: str | Path, option: str, triple_ids, dataset: str) -> list[str]:
    """The triple ids of a split file (`read_ids`); ValueError when `dataset`, whose ids are
    `triple_ids`, does not hold one of them."""
    ids = read_ids(path, option)
    unknown = sorted(set(ids) - set(triple_ids))
    if unknown:
        raise ValueError(f"{option} names {len(unknown)} triple ids that dataset {dataset!r} does not hold, "
                         f"e.g. {unknown[0]!r}")
    return ids
