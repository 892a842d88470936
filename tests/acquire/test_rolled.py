"""Session.rolled keeps a server full by conversations, not by batches given out: the next
batch starts as soon as a batch's worth of conversations in flight are done, even while the
first batch (the one the loop waits for) is still running, and batches are given out in order.
The rollouts themselves are faked (the server is the expensive boundary); the scheduling is real."""

import threading
from types import SimpleNamespace

from acquire.session import AHEAD, Session


def _session(roll, concurrent=True) -> Session:
    s = Session.__new__(Session)
    s.cfg, s.backend, s.roll = SimpleNamespace(batch=2, n=2), SimpleNamespace(concurrent=concurrent), roll
    return s


def test_the_next_batches_start_while_the_first_is_still_running():
    started, first_may_end, seen_all = [], threading.Event(), threading.Event()
    lock, before_release = threading.Lock(), []

    def roll(prompts, step, ended=None):
        with lock:
            started.append(step)
            if len(started) == 6:
                seen_all.set()
        if step == 0:  # the first batch's conversations are the last to end
            first_may_end.wait(10)
        for _ in range(len(prompts) * 2):
            ended()
        return [step] * (len(prompts) * 2)

    def release():
        before_release.append(seen_all.wait(10))  # every batch started while the first still ran?
        first_may_end.set()

    threading.Thread(target=release, daemon=True).start()
    out = list(_session(roll).rolled([(s, ["p", "q"]) for s in range(6)], ahead=2))
    assert before_release == [True], "the later batches waited for the first to be given out"
    assert [step for step, _, _ in out] == list(range(6))
    assert all(r == [step] * 4 for step, _, r in out)


def test_no_more_conversations_in_flight_than_ahead_batches_hold():
    open_now, most, lock = [0], [0], threading.Lock()

    def roll(prompts, step, ended=None):
        with lock:
            open_now[0] += len(prompts) * 2
            most[0] = max(most[0], open_now[0])
        for _ in range(len(prompts) * 2):
            with lock:
                open_now[0] -= 1
            ended()
        return [step]

    out = list(_session(roll).rolled([(s, ["p", "q"]) for s in range(40)], ahead=3))
    assert [step for step, _, _ in out] == list(range(40))
    assert most[0] <= 3 * 4 and AHEAD >= 3


def test_a_backend_without_concurrency_rolls_one_batch_at_a_time():
    calls = []

    def roll(prompts, step, ended=None):
        calls.append(step)
        return [step]

    gen = _session(roll, concurrent=False).rolled([(s, ["p"]) for s in range(3)])
    assert next(gen)[0] == 0 and calls == [0]
    assert [s for s, _, _ in gen] == [1, 2] and calls == [0, 1, 2]
