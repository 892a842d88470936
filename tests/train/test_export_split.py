"""The streaming split and prompt dedup of the exporters (train/export.py: Split, Prompts,
Places) give what the in-memory versions they replaced gave, on random items: the same
items in the same parts in the same order, the fallback that moves one item to an empty
test part included."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from train.export import Item, Places, Prompts, Split, split_of


def split_items(items, test_fraction, group=None):
    """The in-memory split the exporters used before they streamed (the reference)."""
    if group is not None:
        parts = {"train": [], "test": []}
        for label in dict.fromkeys(group(i) for i in items):
            for name, part in split_items([i for i in items if group(i) == label], test_fraction).items():
                parts[name] += part
        return parts
    parts = {"train": [], "test": []}
    for i in items:
        parts[split_of(i.id, test_fraction)].append(i)
    if test_fraction > 0 and not parts["test"] and len(parts["train"]) > 1:
        first = min(parts["train"], key=lambda i: hashlib.sha256(i.id.encode()).digest())
        parts["train"].remove(first)
        parts["test"].append(first)
    return parts


def dedupe_prompts(items):
    seen, out = set(), []
    for i in items:
        k = json.dumps(i.prompt, sort_keys=True)
        if k not in seen:
            seen.add(k)
            out.append(i)
    return out


def item(rng, n):
    kind = rng.choice(["triples", "tasks", "trajectories"])
    prompt = [{"role": "user", "content": f"q{rng.randrange(n // 2 + 1)}"}]  # repeats on purpose
    return Item(f"id{rng.randrange(10 * n)}", kind, "q", "a", [], 1, "", prompt)


@pytest.mark.parametrize("seed", range(40))
def test_streaming_split_and_dedup_equal_the_in_memory_ones(seed):
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 10, 60, 400])
    fraction = rng.choice([0.0, 0.0005, 0.01, 0.05, 0.3, 1.0])
    items = sorted((item(rng, n) for _ in range(n)), key=lambda i: ["triples", "tasks", "trajectories"].index(i.kind))
    grouped = rng.random() < 0.5
    label = (lambda i: i.kind == "trajectories") if grouped else (lambda i: None)
    expected = split_items(dedupe_prompts(items), fraction, group=label if grouped else None)

    places = [(i.kind, k) for k, i in enumerate(items)]
    prompts, kept, split = Prompts(), Places(), Split(fraction)
    for place, i in zip(places, items):
        if prompts.first(i):
            kept.add(place)
            split.see(i.id, place, label(i))
    split.done()
    got = {"train": [], "test": []}
    for value in dict.fromkeys(label(i) for p, i in zip(places, items) if p in kept):
        for place, i in zip(places, items):
            if place in kept and label(i) == value:
                got[split.of(i.id, place, value)].append(i)
    assert got == expected
