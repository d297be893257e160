"""The simulator's and the authorities' collector: full collections skip what survived the last one,
and garbage cycles among frozen objects are still found once the heap has grown."""
import gc
import weakref

import pytest

from producers.heap import FrozenSurvivors


@pytest.fixture(autouse=True)
def only_the_tests_collections():
    """The collections each test makes, counted one by one: none started by its own allocations."""
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()


class Node:
    def __init__(self):
        self.peer = None


def _cycle():
    a, b = Node(), Node()
    a.peer, b.peer = b, a
    return a


def test_a_full_collection_freezes_its_survivors_and_skips_them_next_time():
    kept = [[n] for n in range(20_000)]
    with FrozenSurvivors(floor=10**9) as collector:
        gc.collect()
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        more = [[n] for n in range(1_000)]
        gc.collect()
        assert gc.get_freeze_count() >= frozen + len(more)
        assert collector.young_collections == 2 and collector.whole_heap_collections == 0
    assert gc.get_freeze_count() == 0 and collector._after_collection not in gc.callbacks


def test_frozen_garbage_cycles_are_collected_once_the_heap_has_doubled():
    with FrozenSurvivors(growth=2.0, floor=10**9) as collector:
        gc.collect()                       # everything so far frozen
        collector.floor = gc.get_freeze_count()
        cycle = _cycle()
        alive = weakref.ref(cycle)
        gc.collect()                       # the cycle survives, and is frozen
        del cycle
        gc.collect()
        assert alive() is not None         # frozen: not scanned
        grown = [[n] for n in range(3 * collector.floor // 2)]
        gc.collect()                       # freezes the growth: now more than twice the floor
        assert alive() is not None and collector.whole_heap_collections == 0
        gc.collect()                       # finds the frozen objects grown: unfreezes them
        assert alive() is not None
        gc.collect()                       # and this one scans the whole heap
        assert alive() is None
        assert collector.whole_heap_collections == 1
        assert gc.get_freeze_count() >= len(grown)


def test_without_it_nothing_stays_frozen():
    with FrozenSurvivors():
        gc.collect()
    cycle = _cycle()
    alive = weakref.ref(cycle)
    gc.collect()
    del cycle
    gc.collect()
    assert alive() is None
