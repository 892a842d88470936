"""A corpus without questions for the question builder's tests: short pages about made-up
people, places and organisations that mention each other (a person's page names their
birthplace and employer, an organisation's its seat and founder, a place's its founding),
plus facts no other page holds (years, names without a page of their own).

`write_corpus` writes them as the dataset's `documents` through the storage layer, the way
an import writes passages; it is the one place to switch to a documents-only import.
"""

from __future__ import annotations

from generators.corpus.ids import doc_id
from storage import write_rows

PLACES = [  # (name, province, founded, founder without a page)
    ("Tarrow", "Quell", 1402, "Ebbe Strand"), ("Ostmere", "Valdane", 1288, "Corin Mallet"),
    ("Brisk Harbour", "Quell", 1530, "Tilde Ormsby"), ("Kelmarsh", "Ardent Vale", 1177, "Hugo Penhale"),
    ("Siltholm", "Valdane", 1611, "Aster Quaye"), ("Dunmore Cross", "Ardent Vale", 1349, "Rhoswen Tally"),
    ("Varrick", "Lowmarch", 1455, "Pell Dorrance"), ("Glenhallow", "Lowmarch", 1702, "Sabine Orrel"),
    ("Fenwick Reach", "Quell", 1583, "Osric Vantle"), ("Harlow Ridge", "Valdane", 1266, "Maud Kestrel")]
ORGS = [  # (name, kind, seat, founded, founder person index, emblem)
    ("Halden Survey Society", "mapping guild", "Ostmere", 1888, 0, "Silver Compass"),
    ("Corvane Ironworks", "foundry", "Tarrow", 1851, 2, "Black Anvil"),
    ("Order of the Lantern", "scholarly order", "Kelmarsh", 1703, 4, "Amber Lamp"),
    ("Pellmoor Shipping Company", "shipping line", "Brisk Harbour", 1799, 6, "Blue Pennant"),
    ("Vantle Conservatory", "music school", "Siltholm", 1920, 8, "Golden Reed"),
    ("Greywater Bank", "bank", "Varrick", 1833, 1, "Iron Key"),
    ("Ashgrove Observatory", "observatory", "Glenhallow", 1899, 3, "Seven Stars"),
    ("Marrow Press", "publishing house", "Dunmore Cross", 1864, 5, "Quill Crown")]
PEOPLE = [  # (name, job, birthplace, born, employer org index, spouse without a page)
    ("Orlan Vesk", "cartographer", "Tarrow", 1831, 0, "Mira Coll"),
    ("Idris Fennimore", "banker", "Ostmere", 1790, 5, "Lena Harrow"),
    ("Bettany Crale", "engineer", "Kelmarsh", 1812, 1, "Tomas Wren"),
    ("Caspar Oldwick", "astronomer", "Varrick", 1860, 6, "Elin Sward"),
    ("Juniper Hale", "philosopher", "Dunmore Cross", 1671, 2, "Rufus Brand"),
    ("Morwen Tesk", "printer", "Glenhallow", 1822, 7, "Anselm Roe"),
    ("Ferris Quill", "navigator", "Siltholm", 1761, 3, "Dora Lisle"),
    ("Agathe Lund", "composer", "Fenwick Reach", 1885, 4, "Piet Sorrel"),
    ("Rollo Brisk", "violinist", "Harlow Ridge", 1879, 4, "Nell Farrow"),
    ("Sefa Marlowe", "surveyor", "Brisk Harbour", 1851, 0, "Gideon Pratt"),
    ("Tobin Ashe", "clerk", "Varrick", 1801, 5, "Wilma Kerr"),
    ("Ysolde Penn", "typesetter", "Harlow Ridge", 1840, 7, "Caleb Moss")]


def pages() -> list[tuple[str, str]]:
    """(title, text) of every page."""
    out = []
    for name, province, founded, founder in PLACES:
        out.append((name, f"{name} is a town in the province of {province}. {name} was founded in {founded} "
                          f"by the merchant {founder}."))
    for name, kind, seat, founded, p, emblem in ORGS:
        out.append((name, f"{name} is a {kind} based in {seat}. It was founded in {founded} by {PEOPLE[p][0]}. "
                          f"Its emblem is the {emblem}."))
    for name, job, place, born, org, spouse in PEOPLE:
        out.append((name, f"{name} was a {job} born in {place} in {born}. {name.split()[0]} worked for "
                          f"{ORGS[org][0]}. {name.split()[0]} married {spouse}."))
    return out


def write_corpus(root, dataset: str) -> list[dict]:
    """Commit the pages as `documents` of `dataset`; returns the rows."""
    rows = [{"doc_id": doc_id(t, x), "title": t, "text": x, "source": "test:chain-corpus", "meta": None}
            for t, x in pages()]
    write_rows(root, dataset, "documents", "docs", rows)
    return rows
