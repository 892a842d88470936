"""Record schemas, the atomic Parquet shard writer with its manifest, loaders and the DuckDB
catalog. Imports nothing else from the project.

    from storage import ShardWriter, load_table, Catalog

The names below are imported from their modules on first use, so a command that needs only
the catalog (`forgeplay sql`) does not pay for pyarrow's Parquet writer or the JSON Schemas.
"""

import importlib

_HOMES = {  # name -> (module, name there)
    "Catalog": ("storage.catalog", "Catalog"), "verify": ("storage.catalog", "verify"),
    "resolve_root": ("storage.manifest", "resolve_root"),
    "data_files": ("storage.reader", "data_files"), "load_hf": ("storage.reader", "load_hf"),
    "load_table": ("storage.reader", "load_table"), "rejected_ids": ("storage.reader", "rejected_ids"),
    "KINDS": ("storage.schema", "KINDS"), "RowError": ("storage.schema", "RowError"),
    "load_schema": ("storage.schema", "load"),
    "ShardWriter": ("storage.shards", "ShardWriter"), "write_rows": ("storage.shards", "write_rows"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    module, attr = _HOMES[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
