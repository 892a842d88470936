"""Stable ids for corpus records: the same content always gets the same id.

    doc_id("Korvath", "Korvath is a city in Vantria.")   # 'doc-3f9c...'
"""

from __future__ import annotations

import hashlib


def stable_hash(*parts: str, n: int = 16) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()[:n]


def doc_id(title: str, text: str) -> str:
    """Document id from title and text (duplicates across records collapse to one)."""
    return "doc-" + stable_hash(title, text)


def triple_id(*parts: str) -> str:
    return "tri-" + stable_hash(*parts)
