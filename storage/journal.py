"""An append-only journal of paid work: one JSON line per completed model response, keyed
by a hash of the request (and its seed), written and flushed as each response arrives, so
a stage killed mid-way and run again asks the server nothing it had already answered.

    j = Journal(journal_path(root, "demo", run_id))
    j.get(key)            # the stored value, or None
    j.put(key, value)     # appended and flushed at once (a kill -9 keeps it)
    j.remove()            # the stage finished: its rows are committed, the journal is spent

A line cut short by a kill is ignored on reading. The file lives beside the run records,
`<root>/<dataset>/_journal/<run_id>.jsonl`; readers of the dataset never look at it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from storage import manifest


def journal_path(root, dataset: str, run_id: str) -> Path:
    """Where a run's journal of responses lives."""
    return manifest.dataset_dir(manifest.resolve_root(root), dataset) / "_journal" / f"{run_id}.jsonl"


class Journal:
    """Responses by request key, loaded from the file, appended to it line by line."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._items: dict[str, object] = {}
        self._lock = threading.Lock()
        self._file = None
        self.loaded = 0  # entries found on disk when opened
        if self.path.exists():
            with open(self.path, "rb") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                        self._items[entry["k"]] = entry["v"]
                    except (ValueError, KeyError, TypeError):
                        continue  # the torn last line of a killed writer
        self.loaded = len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def get(self, key: str):
        return self._items.get(key)

    def put(self, key: str, value) -> None:
        """Store `value` under `key`: appended as one line and flushed to the OS at once."""
        line = json.dumps({"k": key, "v": value}, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
                if self._file.tell():  # a torn line left by a kill: start on a line of our own
                    self._file.write("\n")
            self._file.write(line)
            self._file.flush()
            self._items[key] = value

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None

    def remove(self) -> None:
        """Close and delete the journal (its responses are all in committed rows)."""
        self.close()
        self.path.unlink(missing_ok=True)
        self._items.clear()

    def __getstate__(self):  # travels as its path (a worker process reopens it)
        return {"path": str(self.path)}

    def __setstate__(self, state) -> None:
        self.__init__(state["path"])
