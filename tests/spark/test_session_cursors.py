"""When a watch session's cursor below the pipeline's mark is the source's doing, and the range
it reports (``spark_jobs/steps/reconcile/session_cursors``), pure."""

from __future__ import annotations

import pytest

from spark_jobs.steps.reconcile.session_cursors import (
    CONTENT,
    GENERATION,
    WentBack,
    ranges,
    went_back,
)
from watch_service.store.session_marks import Mark, Seen

pytestmark = [pytest.mark.unit]


def mark(wid: str, cursor: int, gen: int = 3, payload: str | None = "h") -> Mark:
    return Mark(wid, "t", cursor, gen, payload)


def seen(wid: str, cursor: int, gen: int = 3, at_mark: str | None = "h", head: int = 90) -> Seen:
    return Seen(wid, "t", cursor, gen, None, head, at_mark)


def test_a_cursor_below_its_mark_counts_when_no_stream_or_the_source_can_explain_it():
    marks = [mark(w, 80) for w in "abcdefghij"] + [mark("k", 80, payload=None)]
    now = [
        seen("a", 80),  # where it was
        seen("b", 85, gen=9),  # moved on
        seen("c", 50),  # same stream generation, lower: the sessions table went back
        seen("d", 50, gen=2),  # an older generation: the same
        seen("e", 50, gen=4),  # a client moved it back; seq 80 is as it was
        seen("f", 50, gen=4, at_mark="other"),  # ... and seq 80 holds another payload now
        seen("g", 50, gen=4, at_mark=None, head=70),  # ... seq 80 is above the head now
        seen("h", 50, gen=4, at_mark=None, head=90),  # ... seq 80 trimmed: no finding
        seen("k", 50, gen=4, at_mark=None, head=70),  # the mark named no record
        seen("z", 10, gen=0),  # a session the pipeline never marked
    ]
    assert went_back(marks, now) == [
        WentBack("c", "t", 50, 80, GENERATION),
        WentBack("d", "t", 50, 80, GENERATION),
        WentBack("f", "t", 50, 80, CONTENT),
        WentBack("g", "t", 50, 80, CONTENT),
    ]


def test_the_range_is_above_the_cursor_and_above_what_the_digests_verified():
    back = [
        WentBack("a", "t", 50, 80, GENERATION),
        WentBack("b", "t", 10, 80, GENERATION),
        WentBack("c", "u", 10, 40, CONTENT),
        WentBack("d", "v", 5, 9, GENERATION),
    ]
    # t verified through 30: b's range starts above it; u through 60: nothing left above;
    # v verified nothing.
    assert ranges(back, {"t": 30, "u": 60}) == [("t", 51, 80), ("t", 31, 80), ("v", 6, 9)]
