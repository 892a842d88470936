"""Words the reasoning texts are made of: names joined into lists, what kind of page a lookup
is, page sentences as clauses, a text cut at a space. Shared by the slot texts of every kind
(generators/synth/think.py) and of the reflection cases (generators/synth/cases.py).

    with_kinds(["Dasta"], ["work"])            # '"Dasta", a creative work'
    page_says(["A"], ["A is in B."])          # 'It says A is in B'
"""

from __future__ import annotations

from generators.corpus.templates import TEMPLATES


def and_list(xs: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1] if xs else ""


def quoted(xs: list[str]) -> str:
    """The names quoted: '"A" and "B"'."""
    return and_list([f'"{x}"' for x in xs])


# the words a page sentence starts with when it does not start with its subject ("As of the last
# census, ...", "Notable people born in ..."): lower-cased when the sentence becomes a clause
OPENERS = {"The"} | {t.text.split()[0] for t in TEMPLATES if not t.text.startswith("{")}


def clause_list(sentences: list[str]) -> list[str]:
    """Fact sentences as clauses: no full stop, an opening word of the page templates in lower case."""
    out = []
    for s in sentences:
        s = s.strip()
        s = s[:-1] if s.endswith(".") and not s.endswith('."') else s
        first = s.split(" ", 1)[0]
        out.append(first.lower() + s[len(first):] if first in OPENERS else s)
    return out


def clauses(sentences: list[str]) -> str:
    """Fact sentences as clauses of one sentence ("A is in B and B has 16 provinces")."""
    return and_list(clause_list(sentences))


def clip(text: str, n: int) -> str:
    """`text` cut to at most `n` characters at a space (no half word or half number)."""
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0]


KIND = {"person": ("a person", "people"), "place": ("a place", "places"),
        "organisation": ("an organisation", "organisations"), "work": ("a creative work", "creative works"),
        "event": ("an event", "events"), "science": ("a scientific concept", "scientific concepts"),
        "general": ("a page of any kind", "pages of any kind")}


def with_kinds(names: list[str], kinds: list[str] | None, quote: bool = True) -> str:
    """The names of the next lookups with what each one is, which tells the tool that finds it:
    '"Dasta", a creative work', '"A" and "B", both places', '"A" (a person) and "B" (a place)'."""
    said = quoted(names) if quote else and_list(names)
    kinds = [k for k in kinds or [] if k in KIND]
    if len(kinds) != len(names) or not names:
        return said
    if len(set(kinds)) == 1:
        one, many = KIND[kinds[0]]
        return f"{said}, {one}" if len(names) == 1 else f"{said}, {'both' if len(names) == 2 else 'all'} {many}"
    parts = [f'{chr(34) + n + chr(34) if quote else n} ({KIND[k][0]})' for n, k in zip(names, kinds)]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def reads(f: dict) -> str:
    """What the last result says, for a prompt."""
    return " ".join(f.get("read") or [])


def then_compute(f: dict) -> str:
    """', then compute ...' when the lookup a slot announces is a computed answer's last one."""
    return ", then compute the answer with the calculator" if f.get("computes") else ""


def page_says(pages: list[str], facts: list[str]) -> str:
    """'It says A is in B' ('They say ...' for several pages): what the pages just read state."""
    return f"{'They say' if len(pages) > 1 else 'It says'} {clauses(facts)}"
