"""The parts of a simulated answer (generators/tools/sim_call.py): AnyOf finds answers in a
text exactly as their compiled patterns do, on its ASCII path (str.find) and its pattern path
alike; results_message writes a search's answer as json.dumps does."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from generators.tools.sim_call import AnyOf, answer_pattern, answers_pattern, results_message

# ASCII letters of both cases, digits, "_", separators, and letters whose case folding is not
# ASCII's (the Kelvin sign, the long s, the dotted I, sharp s, accented e)
CHARS = "abkKsSiIzZ019_ .,-'()" + "\u212a\u017f\u0130\u00df\u00e9\u00c9"


def by_patterns(answers: list[str], text: str) -> bool:
    return any(answer_pattern(a.strip()).search(text) for a in answers if a.strip())


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.text(CHARS, min_size=0, max_size=6), min_size=1, max_size=3),
       st.text(CHARS, max_size=30), st.data())
def test_any_of_finds_what_the_patterns_find(answers, text, data):
    # half of the texts hold one of the answers, in another case, between random characters
    if answers[0].strip() and data.draw(st.booleans()):
        a = answers[0].strip()
        a = a.upper() if data.draw(st.booleans()) else a.lower()
        text = data.draw(st.text(CHARS, max_size=5)) + a + data.draw(st.text(CHARS, max_size=5))
    assert AnyOf(answers).search(text) == by_patterns(answers, text)


def test_whole_words_only_case_ignored():
    found = answers_pattern(("Valor", "1,863"))
    assert found.search("They met in VALOR.") and found.search("in 1,863 (about)")
    assert not found.search("Valorous times") and not found.search("a_valor") and not found.search("11,863")
    assert found.search("Valor_x Valor")  # the second one stands alone
    assert answers_pattern(("  ", "")) is None


def test_unicode_text_goes_to_the_pattern():
    # the pattern ignores case as Unicode does: "k" is found as the Kelvin sign, which lower() keeps apart
    assert AnyOf(["k"]).search("\u212a") == by_patterns(["k"], "\u212a") is True
    assert AnyOf(["caf\u00e9"]).search("CAF\u00c9 au lait") is True


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.tuples(st.text(), st.text(), st.text()), max_size=4))
def test_a_search_answer_is_what_json_writes(results):
    """results_message writes byte for byte what json.dumps writes (quotes, backslashes, control
    characters, any Unicode), and the fallback does for values that are not strings."""
    want = json.dumps({"results": [{"doc_id": d, "title": t, "snippet": s} for d, t, s in results]},
                      ensure_ascii=False)
    assert results_message(results) == want
    odd = [(d, 7, s) for d, _, s in results]
    assert results_message(odd) == json.dumps({"results": [{"doc_id": d, "title": 7, "snippet": s}
                                                           for d, _, s in odd]}, ensure_ascii=False)
