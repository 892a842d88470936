"""The interval experiments/sft_tool_use.py prints beside each exact match (Wilson, 95%)."""

import pytest

from experiments.sft_tool_use import interval


def test_the_interval_holds_the_share_and_narrows_with_more_questions():
    low, high = interval(12, 48)
    assert low < 0.25 < high
    assert (low, high) == pytest.approx((0.149, 0.388), abs=1e-3)
    wide, narrow = interval(12, 48), interval(120, 480)
    assert narrow[1] - narrow[0] < (wide[1] - wide[0]) / 2


def test_no_right_answer_still_leaves_room_above_zero():
    low, high = interval(0, 48)
    assert low == 0.0 and high == pytest.approx(1.96 ** 2 / (48 + 1.96 ** 2))  # the closed form at k = 0
    assert interval(48, 48)[1] == pytest.approx(1.0)


def test_an_empty_set_is_an_error():
    with pytest.raises(ValueError, match="at least one question"):
        interval(0, 0)
