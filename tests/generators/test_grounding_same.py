"""The faster grounding check (generators/synth/sources.py: mentions looked up in the plain
sources where that is exact; numbers, sentence ends and stretches of capitalised words found by
one precompiled pattern that jumps to them; number words looked for only where an automaton
finds one; names decided without the sources' lower-case words where they cannot matter; tool
results read by orjson where it reads as json) gives exactly the verdicts of the check before
it (tests/generators/grounding_before.py, frozen), and answers each question about its sources
as their whole reading does: on 30,000 random texts built from the awkward parts of the
language the check reads (possessives, hyphenated number words, connectors, digits inside
words, non-ASCII capitals, JSON tool results), and on every message of 400 synthesized
trajectories (every reasoning form)."""

from __future__ import annotations

import json
import random

from generators.llm.toolcalls import split_think
from generators.synth import grounding as now
from generators.synth import names
from generators.synth.sources import _CAPITAL_CONNECTOR as CAPITAL_CONNECTOR
from generators.synth.sources import Sources
from tests.generators import grounding_before as before

WORDS = ["the", "The", "of", "Treaty", "Stozoth", "born", "Born", "in", "In", "So", "Comparing", "quickly", "Quickly",
         "I", "i", "Ada", "Lovelace's", "Lovelace’s", "Ferrow", "Ferrows", "ferrow", "river", "River", "de", "van", "Van",
         "one", "One", "twenty-one", "Twenty-One", "twenty--one", "one-time", "ninety-nine-two", "sixteen", "sixty",
         "1887", "1,654,300", "3.5", "1920s", "12ab", "ab12", "O'Brien", "McDonald", "iPhone", "Jean-Luc", "É", "Émile",
         "straße", "İstanbul", "_x", "x_y", "1'B", "ab1'Bc", "rock'n'roll", "s'", "x's", "la", "La", "Mars'", "ǅemal",
         "page", "pages", "Pages", "Answer", "answer", "ok", "Birth", "birth", "births", "two", "Two", "eight-twenty-one",
         "0", "7", "12", "99", "100", "1,000", "2.50", "-", "—", "’", "'", '"', "(", ")", ":", ";", "ΣΩ", "Ωmega",
         "bIrth", "BIRTH", "Stozoth's", "x1887", "1887.5", "1887,5", "10,000", "10000", "0021", "21", "5a9cb921",
         "ς", "σ", "Ada'", "'Ada", "twenty-one-time", "Twenty", "ninety-nine", "Ferrow-river", "s", "S"]
SEPS = [" ", " ", " ", " ", ", ", ". ", "! ", "? ", "\n", ": ", "; ", " - ", "  ", "\u00a0", " (", ") ", "-", "'", "’", ".."]


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(WORDS) + rng.choice(SEPS) for _ in range(n)).strip()


def _source(rng: random.Random) -> str:
    if rng.random() < 0.3:  # a tool result
        return json.dumps({"results": [{"doc_id": f"d{rng.randint(0, 99)}", "title": _text(rng, 3),
                                        "snippet": _text(rng, 20)} for _ in range(rng.randint(1, 3))]},
                          ensure_ascii=rng.random() < 0.5)
    return _text(rng, rng.randint(0, 30))


def _same(sources: list[str], text: str) -> bool:
    a, b = before.Sources(sources), Sources(sources)
    return (a.ungrounded(text) == b.ungrounded(text) and a.numbers == b.numbers and a.lower == b.lower
            and a.text == b.text and before.names_in(text) == names.names_in(text)
            and before.names_in(text, a.lower) == names.names_in(text, a.lower) and _same_answers(a, sources, text)
            and _parts(text, a.lower))


def _parts(text: str, common: set[str]) -> bool:
    """What the quick name check in Sources counts on (names.py `stretches`): each name of
    a stretch, read with or without `common`, is a whole-word part of the stretch; and each
    name read with `common` is one of a name read without it, but where a capitalised
    connector follows the stretch's first word."""
    def within(part: str, whole: str) -> bool:
        return f" {now.normalized(part)} " in f" {now.normalized(whole)} "

    for first, rest, starts in names.stretches(text):
        loose, strict = names.stretch_names(first, rest, starts), names.stretch_names(first, rest, starts, common)
        if not all(within(n, first + rest) for n in loose + strict):
            return False
        if not (CAPITAL_CONNECTOR.search(rest) or all(any(within(n, m) for m in loose) for n in strict)):
            return False
    return True


def _same_answers(a: before.Sources, sources: list[str], text: str) -> bool:
    """Each question the faster Sources answers from the plain texts (names, numbers and words
    of `text`, and its capitalised words lower-cased, with their plurals) is answered as the whole
    reading of the sources answers it."""
    b = Sources(sources)  # (fresh: nothing read whole yet)
    words = {w.lower() for w in names.TOKEN_RE.findall(text)}
    return (all(b.has_name(n) == a.has_name(n) for n in before.names_in(text))
            and all(b.has_number(n) == (n in a.numbers) for n in before.numbers_in(text))
            and all(b.has_lower(w) == (w in a.lower) for w in words)
            and all(b.has_lower(w, w + "s", w[:-1]) == bool({w, w + "s", w[:-1]} & a.lower) for w in words))


def test_random_texts_get_the_same_verdicts():
    rng = random.Random(11)
    cases = [([_source(rng) for _ in range(rng.randint(0, 4))], _text(rng, rng.randint(1, 25))) for _ in range(30_000)]
    differ = [c for c in cases if not _same(*c)]
    assert not differ, differ[:3]


def test_every_message_of_synthesized_trajectories(tmp_path):
    """Each think of 400 trajectories against the messages before it, as the rules layer reads them."""
    from generators.corpus.build import WorldConfig, write
    from generators.synth.synthesize import Session, SynthConfig, load_inputs
    from generators.tools.bank import build_bank

    root = tmp_path / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")
    bank = build_bank(seed=3, variants_per_tool=1, calculator=True)
    rows = []
    for reasoning in ("facts", "brief", "evidence", "plan"):
        s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=100, calculator=True, texts="template",
                                                        reasoning=reasoning), bank)
        rows += s.trajectories(s.plans(), None, "run")[0]
    assert len(rows) == 400
    checked = 0
    for r in rows:
        sources: list[str] = []
        for m in r["messages"]:
            think = split_think(m["content"]).think if m["role"] == "assistant" else None
            if think:
                assert _same(sources, think), (r["traj_id"], think)
                checked += 1
            assert _same(sources, m["content"])  # every message read as a text too
            sources.append(m["content"])
    assert checked >= 1200


def test_capitals_found_by_search_make_the_stretches_of_reading_word_by_word():
    """`stretches` of an ASCII text searches for its capitals, and reads the words around a
    capital after a digit, an apostrophe or a hyphen; on 100,000 random strings of the
    characters that decide where a word starts and a sentence opens, it finds what reading
    every word finds (the pattern `_runs`); `mentions`, which reads the numbers in the same scan,
    finds those of `numbers_in` too (the frozen reading's)."""
    rng = random.Random(5)
    pieces = list("aAbBzZ '-_09.,;:!?\n\t") + ["of", "de", "The", "Of", "Van", "la", "I", "So", "'s", "1.5", "2,000",
                                                  "twenty-one", "Ten", "often"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(100_000)]
    differ = [t for t in texts if names.stretches(t) != list(names._word_stretches(t))]
    assert not differ, differ[:3]
    differ = [t for t in texts if now.mentions(t) != (before.numbers_in(t), list(names._word_stretches(t)))]
    assert not differ, differ[:3]
    unsure = sum(1 for t in texts if any(m.group(1) is None for m in names._ascii_stretches().finditer(t)))
    assert 10_000 < unsure < 90_000  # (texts with and without a capital after a digit, "'" or "-")


def test_tool_results_read_as_json_reads_them():
    """`plain_text` reads JSON with orjson where it reads as json does; integers beyond 64 bits,
    floats, NaN, numbers out of range and lone surrogates come out as json reads them, on
    edge cases and on 5,000 random JSON values."""
    edges = ['[123456789012345678901234567890]', '[-9223372036854775809]', '[18446744073709551616]',
             '[9223372036854775807, -9223372036854775808]', '[1e400]', '[NaN, Infinity]', '["\\ud800"]',
             '[0.1, 1E5, -0, 1.0, 5e-324, 0.30000000000000004]', '{"a": 1, "b": 2, "a": 3}',
             '{"x": {"y": ["a", {"z": "b"}]}, "w": true, "n": null, "e": "\\u00e9\\n"}', '{"a": }', '[1, 2', '{}']
    rng = random.Random(7)

    def value(depth: int):
        r = rng.random()
        if depth > 2 or r < 0.5:
            return rng.choice([rng.randint(-10**25, 10**25), rng.randint(-99, 99), rng.random() * 10**rng.randint(-5, 30),
                               _text(rng, 3), True, None, float("nan")])
        if r < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {_text(rng, 1): value(depth + 1) for _ in range(rng.randint(0, 4))}
    randoms = [json.dumps(value(0), ensure_ascii=rng.random() < 0.5) for _ in range(5_000)]
    differ = [s for s in edges + randoms if now.plain_text(s) != before.plain_text(s)]
    assert not differ, differ[:3]
    assert sum(1 for s in randoms if s[:1] in "{[") > 1_000
