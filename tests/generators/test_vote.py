"""Majority vote: clusters by normalised answer, the largest first, ties to the earliest."""

from generators.vote import rewards, vote


def test_largest_cluster_wins_and_normalised_answers_cluster_together():
    v = vote(["Rome", "Paris", "the paris.", None, "rome", "PARIS", ""])
    assert v.label == "Paris" and v.sizes == (3, 2) and v.members == ((1, 2, 5), (0, 4))
    assert v.share == 3 / 7 and v.valid == 5 / 7
    assert rewards(v, v.label) == [0, 1, 1, 0, 0, 1, 0]
    assert rewards(v, "Rome") == [1, 0, 0, 0, 1, 0, 0]


def test_ties_go_to_the_cluster_answered_first_and_no_answer_gives_no_label():
    assert vote(["Oslo", "Bern", "Bern", "Oslo"]).label == "Oslo"
    assert vote(["Bern", "Oslo", "Oslo", "Bern"]).label == "Bern"
    empty = vote([None, "", "  "])
    assert empty.label is None and empty.share == 0.0 and rewards(empty, None) == [0.0] * 3
    assert vote(["twenty-one", "21"]).sizes == (2,)  # number words normalise to digits
