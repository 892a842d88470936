"""flows/common.py `set_aside`: a flow's set-up runs with no cyclic-collector pass, what it
built is kept out of later passes until the flow ends, and then nothing stays set aside, also
when the set-up fails or the collector was off to begin with."""

import gc

import pytest

from flows.common import set_aside


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_setup_runs_without_passes_and_its_objects_are_set_aside_until_the_end():
    assert gc.isenabled() and gc.get_freeze_count() == 0
    seen = {}

    def build():
        seen["enabled"] = gc.isenabled()
        return [Node() for _ in range(100)]

    with set_aside() as setup:
        nodes = setup(build)
        assert seen["enabled"] is False and gc.isenabled()
        assert gc.get_freeze_count() >= len(nodes)  # out of the passes' sight
        del nodes
        gc.collect()
        assert gc.get_freeze_count() >= 100  # cyclic garbage set aside is not freed meanwhile...
    assert gc.get_freeze_count() == 0  # ...but handed back at the end, and freed by the next pass
    assert gc.isenabled()


def test_a_failed_setup_leaves_the_collector_as_it_was():
    def fail():
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        with set_aside() as setup:
            setup(fail)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_collector_turned_off_before_stays_off():
    gc.disable()
    try:
        with set_aside() as setup:
            setup(list)
            assert not gc.isenabled()
    finally:
        gc.enable()
    assert gc.get_freeze_count() == 0
