"""What the labels of a dataset show: the ledger's spend and budget left, and per strategy
and per source (column, queue, llm) how many labels were bought, what they cost and how
often a bought label corrected the majority vote (the pseudo-label of the same prompt did
not match it after answer normalisation).

    report = label_report(root, "world_labels")
    report["ledger"]["left"], report["strategies"]["care"]["corrected"], report["sources"]["queue"]["cost"]
"""

from __future__ import annotations

from acquire.ledger import Ledger
from generators.answers import match
from storage import load_table
from storage.manifest import dataset_dir


def label_report(root, dataset: str) -> dict:
    """{"ledger": Ledger.summary(), "strategies": {name: {bought, cost, corrected, share}},
    "sources": {name: {...the same}}}."""
    path = dataset_dir(root, dataset) / "_ledger.sqlite"
    if not path.exists():
        raise FileNotFoundError(f"dataset {dataset!r} has no label ledger ({path}): run forgeplay acquire-labels first")
    rows = load_table(dataset, "labels", root).to_pylist()
    pseudo = {r["prompt_id"]: r["label"] for r in rows if r["source"] == "pseudo"}
    out: dict[str, dict[str, dict]] = {"strategies": {}, "sources": {}}
    for r in rows:
        if r["source"] == "pseudo":
            continue
        vote = pseudo.get(r["prompt_id"])
        corrected = int(vote is None or not match(vote, r["label"] or "").em)
        for by, key in (("strategies", r["strategy"]), ("sources", r["source"])):
            s = out[by].setdefault(key, {"bought": 0, "corrected": 0, "cost": 0.0})
            s["bought"] += 1
            s["cost"] += r["cost"]
            s["corrected"] += corrected
    for s in [*out["strategies"].values(), *out["sources"].values()]:
        s["share"] = s["corrected"] / s["bought"] if s["bought"] else 0.0
    return {"ledger": Ledger(path).summary(), **{by: dict(sorted(v.items())) for by, v in out.items()}}
