"""Record schemas, the atomic Parquet shard writer with its manifest, loaders and the DuckDB
catalog. Imports nothing else from the project.

    from storage import ShardWriter, load_table, Catalog
"""

from storage.catalog import Catalog, verify
from storage.manifest import resolve_root
from storage.reader import data_files, load_hf, load_table, rejected_ids
from storage.schema import KINDS, RowError, load as load_schema
from storage.shards import ShardWriter, write_rows

__all__ = ["Catalog", "KINDS", "RowError", "ShardWriter", "data_files", "load_hf", "load_schema",
           "load_table", "rejected_ids", "resolve_root", "verify", "write_rows"]
