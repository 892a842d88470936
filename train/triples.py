"""Which of a dataset's triples a training stage takes as prompts (`--triples`): all of them,
or only those its trajectories were built from, which leaves the held-out triples that
`forgeplay train eval` asks unseen by GRPO and by label acquisition (how `forgeplay run`
keeps its evaluations clean)."""

from __future__ import annotations

from train.configs import TRIPLE_SETS


def pick_triples(root, dataset: str, which: str, limit: int = 0) -> list[dict]:
    """The dataset's triples of set `which` (TRIPLE_SETS), in storage order, at most `limit`;
    ValueError when the set is unknown or empty."""
    from storage import load_table

    if which not in TRIPLE_SETS:
        raise ValueError(f"--triples must be one of {', '.join(TRIPLE_SETS)}, not {which!r}")
    triples = load_table(dataset, "triples", root).to_pylist()
    if which == "trained":
        used = set(load_table(dataset, "trajectories", root, columns=["triple_id"]).column("triple_id").to_pylist())
        triples = [t for t in triples if t["triple_id"] in used]
    triples = triples[:limit] if limit else triples
    if not triples:
        raise ValueError(f"dataset {dataset!r} has no {'' if which == 'all' else which + ' '}triples")
    return triples
