"""Compare two data roots kind by kind: the committed ids, and the rows without the columns
that record when they were written (created_at, and lineage, which holds no content). Used
to check that a refactoring changed no output: run the same command at a fixed seed into two
roots, before and after, then

    python experiments/compare_roots.py /tmp/before /tmp/after

prints one line per (dataset, kind): rows on each side, ids only on one side, rows whose
content differs; exit 1 when anything differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage import load_table, manifest  # noqa: E402
from storage.reader import kinds  # noqa: E402

WHEN = ("created_at", "lineage")


def rows_by_id(root: Path, dataset: str, kind: str) -> dict[str, dict]:
    table = load_table(dataset, kind, root)
    keep = [c for c in table.column_names if c not in WHEN]
    return {r["id"]: r for r in table.select(keep).to_pylist()}


def compare(a: Path, b: Path) -> list[dict]:
    out = []
    for ds in sorted(set(manifest.datasets(a)) | set(manifest.datasets(b))):
        for kind in sorted(set(kinds(a, ds)) | set(kinds(b, ds))):
            ra, rb = rows_by_id(a, ds, kind), rows_by_id(b, ds, kind)
            shared = ra.keys() & rb.keys()
            out.append({"dataset": ds, "kind": kind, "rows_a": len(ra), "rows_b": len(rb),
                        "only_a": len(ra.keys() - rb.keys()), "only_b": len(rb.keys() - ra.keys()),
                        "content_differs": sum(ra[i] != rb[i] for i in shared)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="first data root")
    ap.add_argument("b", type=Path, help="second data root")
    args = ap.parse_args()
    rows = compare(args.a, args.b)
    cols = list(rows[0]) if rows else []
    print("  ".join(f"{c:>15}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]!s:>15}" for c in cols))
    same = all(r["only_a"] == r["only_b"] == r["content_differs"] == 0 for r in rows)
    print("identical ids and rows" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
