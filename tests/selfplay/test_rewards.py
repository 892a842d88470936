"""The examiner reward: only the format part for tasks no attempt or every attempt solves,
the maximum for one solved attempt, falling as more attempts solve it; the solve count uses
the normalised exact match."""

import pytest

from selfplay.rewards import examiner_reward, solve_count


@pytest.mark.parametrize("n", [2, 3, 8])
def test_unsolved_and_always_solved_tasks_get_only_the_format_part(n):
    for k in (0, n):
        assert examiner_reward(True, k, n) == 0.5
        assert examiner_reward(False, k, n) == 0.0


@pytest.mark.parametrize("n", [2, 3, 8])
def test_one_solved_attempt_gives_the_maximum(n):
    assert examiner_reward(True, 1, n) == 1.5
    assert examiner_reward(False, 1, n) == 1.0
    assert max(examiner_reward(True, k, n) for k in range(n + 1)) == examiner_reward(True, 1, n)


def test_reward_falls_as_more_attempts_solve_the_task():
    n = 6
    rewards = [examiner_reward(True, k, n) for k in range(1, n)]
    assert all(a > b for a, b in zip(rewards, rewards[1:]))
    assert rewards == pytest.approx([0.5 + (n - k) / (n - 1) for k in range(1, n)])


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (0, 0), (-1, 4), (5, 4)])
def test_bad_counts_raise(k, n):
    with pytest.raises(ValueError):
        examiner_reward(True, k, n)


def test_solve_count_uses_normalised_exact_match():
    answers = ["The Ben Orr.", "ben  orr", "B. Orr", "Ben", None, "Orr, Ben"]
    assert solve_count(answers, "Ben Orr") == 2
    assert solve_count(answers, "Ben Orr", aliases=["B Orr"]) == 3
    assert solve_count([], "Ben Orr") == 0
