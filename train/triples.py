"""Which of a dataset's triples a stage takes as prompts: all of them, only those its
trajectories were built from (`--triples trained`: GRPO and label acquisition, so the
held-out triples stay unseen; how `forgeplay run` keeps its evaluations clean), or only the
others, held out (what `forgeplay train eval` asks)."""

from __future__ import annotations

from train.configs import TRIPLE_SETS

USED = {"all": None, "trained": True}  # --triples -> select_triples' `used`


def select_triples(root, dataset: str, used: bool | None = None, limit: int = 0, by_id: bool = False) -> list[dict]:
    """The dataset's triples: all (`used` None), only those its trajectories were built from
    (True) or only the others, held out (False); in storage order (by triple id with `by_id`),
    at most `limit`. ValueError when there is none."""
    from storage import load_table

    triples = load_table(dataset, "triples", root).to_pylist()
    if by_id:
        triples.sort(key=lambda t: t["triple_id"])
    if used is not None:
        ids = set(load_table(dataset, "trajectories", root, columns=["triple_id"]).column("triple_id").to_pylist())
        triples = [t for t in triples if (t["triple_id"] in ids) == used]
    triples = triples[:limit] if limit else triples
    if not triples:
        raise ValueError(f"dataset {dataset!r} has no {({None: '', True: 'trained ', False: 'held-out '})[used]}triples")
    return triples


def pick_triples(root, dataset: str, which: str, limit: int = 0, by_id: bool = False) -> list[dict]:
    """The triples of the `--triples` set `which` (TRIPLE_SETS); ValueError when it is unknown
    or empty."""
    if which not in TRIPLE_SETS:
        raise ValueError(f"--triples must be one of {', '.join(TRIPLE_SETS)}, not {which!r}")
    return select_triples(root, dataset, USED[which], limit, by_id)
