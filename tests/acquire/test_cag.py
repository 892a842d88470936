"""CAG: the closed form from the vote counts equals the direct computation from rewards."""

import math

import pytest

from acquire.cag import cag, cag_from_counts


def rewards(n: int, x: int, y: int) -> tuple[list[float], list[float]]:
    """Pseudo rewards (the x vote members right) and true ones (y others right, the vote wrong)."""
    return [1.0] * x + [0.0] * (n - x), [0.0] * x + [1.0] * y + [0.0] * (n - x - y)


def test_cag_for_eight_responses():
    assert cag_from_counts(8, 5, 0, vote_correct=True) == 0.0
    assert cag([1.0] * 5 + [0.0] * 3, [1.0] * 5 + [0.0] * 3) == 0.0  # the vote was right: same advantages
    assert cag_from_counts(8, 3, 0) == pytest.approx(math.sqrt(8))
    assert cag(*rewards(8, 3, 0)) == pytest.approx(math.sqrt(8))
    assert cag_from_counts(8, 4, 4) == pytest.approx(4 * math.sqrt(2))
    assert cag(*rewards(8, 4, 4)) == pytest.approx(4 * math.sqrt(2))


@pytest.mark.parametrize("n", range(2, 17))
def test_closed_form_equals_direct_computation_for_every_feasible_count(n):
    for x in range(0, n + 1):
        for y in range(0, n - x + 1):
            direct = cag(*rewards(n, x, y))
            assert cag_from_counts(n, x, y) == pytest.approx(direct, abs=1e-9), (n, x, y)


def test_infeasible_counts_and_mismatched_rewards_are_refused():
    with pytest.raises(ValueError, match="n - x"):
        cag_from_counts(8, 5, 4)
    with pytest.raises(ValueError, match="must both be"):
        cag([1.0, 0.0], [1.0])
