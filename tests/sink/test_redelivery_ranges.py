"""The sink's re-delivery ranges (``sink/redelivery``, ``protocol/redelivery``), pure: copies at
or below the cursor become ranges of one verdict, by comparison with the copy landed before."""

from __future__ import annotations

import pytest

from watch_service.protocol.redelivery import (
    DUPLICATE,
    REISSUED,
    UNCHECKED,
    Redelivery,
    from_footer,
    merge,
)
from watch_service.sink.redelivery import Redeliveries

pytestmark = pytest.mark.unit


def land(book: Redeliveries, seqs: range, cursor: int | None, frame: int, content: str = "a"):
    for s in seqs:
        book.observe("t", s, 1000 + s, f"{content}{s}", cursor, frame)


def test_copies_at_or_below_the_cursor_are_ranges_of_one_verdict() -> None:
    book = Redeliveries(recent=8)
    land(book, range(1, 11), None, 1)  # 1..10 landed; 3..10 remembered
    assert book.take() == []
    land(book, range(5, 8), 10, 2)  # the same copies again: a plain duplicate
    land(book, range(8, 10), 10, 3, content="b")  # 8, 9 issued again with other content
    land(book, range(10, 13), 10, 4)  # 10 the same, 11 and 12 new
    assert book.take() == [
        Redelivery("t", 5, 7, DUPLICATE, 10, (2, 2)),
        Redelivery("t", 8, 9, REISSUED, 10, (3, 3)),
        Redelivery("t", 10, 10, DUPLICATE, 10, (4, 4)),
    ]
    land(book, range(1, 3), 12, 5)  # forgotten (recent=8): nothing to compare with
    land(book, range(8, 10), 12, 5, content="b")  # the reissued copies are the ones now held
    assert book.take() == [
        Redelivery("t", 1, 2, UNCHECKED, 12, (5, 5)),
        Redelivery("t", 8, 9, DUPLICATE, 12, (5, 5)),
    ]


def test_a_range_split_by_a_flush_reads_back_whole() -> None:
    book = Redeliveries()
    land(book, range(1, 21), None, 1)
    land(book, range(1, 6), 20, 2)
    first = book.take()  # a flush: the open range is closed into this segment's footer
    land(book, range(6, 11), 20, 3)
    second = book.take()
    footers = [{"redelivered": [r.as_dict() for r in part]} for part in (first, second)]
    read = [r for f in footers for r in from_footer(f)]
    assert merge(read) == [Redelivery("t", 1, 10, DUPLICATE, 20, (2, 3))]
    assert from_footer({"cursors": {}}) == []


def test_the_run_reports_each_range_on_a_line() -> None:
    from spark_jobs.runner import progress_line, redelivery_lines

    figures = {
        "batch": 3,
        "redelivered": [
            {"consumer": "c1", **Redelivery("t", 101, 200, REISSUED, 200, (7, 9)).as_dict()}
        ],
    }
    assert redelivery_lines(figures) == [
        "c1 t: seqs 101..200 re-delivered at or below its cursor 200 (reissued; frames 7..9)"
    ]
    assert progress_line("compact", 1.0, figures) == "[pipeline] compact       1.0 s  batch=3"
    assert redelivery_lines({"batch": None}) == []
