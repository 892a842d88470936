"""evidence._with_article finds "the NAME" exactly where the pattern \\b[Tt]he NAME\\b would (it
searches without compiling a pattern per name: a 50,000-entity world has too many names to cache)."""

import random
import re

from generators.synth.evidence import _with_article

PARTS = ["the ", "The ", "THE ", "Ada", "Ada's", "River", "Inc.", "é", "_", "x", " ", ",", ".", "-", "1", "the", "'"]


def test_the_name_as_the_pattern_finds_it():
    rng = random.Random(3)
    for _ in range(20_000):
        name = "".join(rng.choice(["Ada", "River Ferrow", "Inc.", "é", "X-1", "_y", "Ada's"]) for _ in range(rng.randint(1, 2)))
        text = "".join(rng.choice(PARTS + [name, f"the {name}", f"The {name}"]) for _ in range(rng.randint(0, 8)))
        want = f"the {name}" if re.search(rf"\b[Tt]he {re.escape(name)}\b", text) else name
        assert _with_article(name, text) == want, (name, text)
