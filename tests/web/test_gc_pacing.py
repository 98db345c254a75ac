"""The garbage collection pacer (web/gc_pacing.py) on this process's real collector: what
survives a full collection is frozen, so the next one does not walk it; a cycle frozen that
way is collected only after a thaw, which enough ended streams, or an hour, bring."""

from __future__ import annotations

import gc
import weakref

import pytest

from watch_service.web import gc_pacing
from watch_service.web.gc_pacing import GcPacer


class Node:
    """A tracked object that can be part of a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref:
    """A two-object cycle nothing else refers to once this returns; a weak reference to it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def tracked(obj: object) -> bool:
    """Whether the collector walks ``obj`` (it is in a generation, not frozen)."""
    return any(o is obj for g in range(3) for o in gc.get_objects(generation=g))


@pytest.fixture
def clock():
    now = [1000.0]
    return now


@pytest.fixture
def pacer(clock):
    pacer = GcPacer(clock=lambda: clock[0])
    yield pacer
    pacer.close()
    gc.unfreeze()  # this test process froze nothing before
    gc.collect()


def test_what_survives_a_full_collection_is_frozen(pacer):
    kept = Node()
    assert tracked(kept)
    gc.collect()
    assert pacer.freezes == 1
    assert not tracked(kept)
    assert gc.get_freeze_count() > 0
    gc.collect(1)  # a younger collection does not freeze
    assert pacer.freezes == 1


def test_a_frozen_cycle_waits_for_enough_ended_streams(pacer):
    alive = [Node()]
    ref = cycle()
    # Young collections would take the cycle before it reaches a full one: freeze it at once,
    # as a full collection that found it still referenced would have.
    gc.freeze()
    gc.collect()
    assert ref() is not None  # frozen: the collector does not look at it

    pacer.streams_ended(600, still_open=2000)  # fewer than are open: no thaw
    pacer.streams_ended(600, still_open=2000)
    gc.collect()
    assert (ref() is not None, pacer.thaws) == (True, 0)

    pacer.streams_ended(900, still_open=2000)  # 2,100 ended > 2,000 open
    assert (pacer.thaws, pacer.ended) == (1, 0)
    gc.collect()
    assert ref() is None
    assert not tracked(alive[0])  # what lives is frozen again by that collection


def test_few_open_streams_thaw_after_the_minimum(pacer):
    pacer.streams_ended(gc_pacing.THAW_MIN_ENDED, still_open=3)
    assert pacer.thaws == 0
    pacer.streams_ended(1, still_open=3)
    assert pacer.thaws == 1


def test_an_hour_after_the_last_thaw_a_full_collection_thaws_instead(pacer, clock):
    ref = cycle()
    gc.freeze()
    clock[0] += gc_pacing.THAW_EVERY_S - 1
    gc.collect()
    assert (ref() is not None, pacer.thaws) == (True, 0)

    clock[0] += 2
    gc.collect()  # thaws: nothing frozen now
    assert (pacer.thaws, gc.get_freeze_count()) == (1, 0)
    gc.collect()  # walks everything, takes the cycle, freezes again
    assert ref() is None
    assert pacer.freezes >= 2 and gc.get_freeze_count() > 0


def test_close_unhooks_the_pacer(clock):
    # What a collection leaves frozen with no pacer hooked: none on 3.11; CPython 3.12.1
    # reports 375 even right after ``gc.unfreeze()`` and a collection, with no callbacks.
    gc.unfreeze()
    gc.collect()
    unpaced = gc.get_freeze_count()
    pacer = GcPacer(clock=lambda: clock[0])
    pacer.close()
    pacer.close()  # twice is harmless
    try:
        gc.collect()
        assert (pacer.freezes, gc.get_freeze_count()) == (0, unpaced)
    finally:
        gc.unfreeze()
