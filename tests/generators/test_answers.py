"""Answer normalization, exact match and F1."""

import pytest

from generators.answers import f1, match, normalize, number_to_words


@pytest.mark.parametrize("a,b", [
    ("The Velmora Institute", "velmora institute"),
    ("twenty-one", "21"),
    ("Twenty one years", "21 years"),
    ("1,887", "1887"),
    ("  Paris!  ", "paris"),
    ("an apple", "Apple."),
    ("“Quoted” — text", "quoted text"),
])
def test_equivalent_after_normalization(a, b):
    assert normalize(a) == normalize(b)


@pytest.mark.parametrize("a,b", [("1887", "1888"), ("Paris", "Parish"), ("one", "won")])
def test_different_stay_different(a, b):
    assert normalize(a) != normalize(b)


def test_match_uses_aliases_and_reports_f1():
    m = match("Ada Quell", "Adaline Quell", ["Ada Quell", "Quell"])
    assert m.em and m.matched == "Ada Quell" and m.f1 == 1.0
    m = match("Quell family", "Adaline Quell")
    assert not m.em and m.f1 == pytest.approx(0.5)
    assert match("", "x").f1 == 0.0 and f1("", "") == 1.0


def test_number_words_round_trip():
    for n in (0, 7, 13, 20, 42, 99):
        assert normalize(number_to_words(n)) == str(n)
    assert number_to_words(1887) == "1887"
