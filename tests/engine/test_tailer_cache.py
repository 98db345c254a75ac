"""Unit tests for the tailer's cache as a page source: when it can answer, and that its pages
follow the shared page rule. No database: the cache is filled by hand."""

from __future__ import annotations

import pytest

from watch_service.engine.hub import Hub
from watch_service.engine.tailer import CachedRecord, Tailer
from watch_service.protocol.records import Record

pytestmark = pytest.mark.unit
ALL = (True, True, True)


def tailer(first: int, last: int, earliest: int = 1) -> Tailer:
    """A tailer whose cache holds seqs first..last of a topic retained from ``earliest``."""
    # A real hub whose pool is never used: a page from the cache reads nothing.
    t = Tailer(Hub(pool=None, db_url=""), topic="t")  # type: ignore[arg-type]
    t.cache = [
        CachedRecord(Record(s, 100 + s, None, None, None, f'"{s}"')) for s in range(first, last + 1)
    ]
    t.cache_after, t.head, t.durable_head, t.earliest = first - 1, last, last, earliest
    return t


def test_a_page_from_the_cache_with_its_encodings():
    page = tailer(5, 9).cached(6, 2, 1 << 20, ALL, 9)
    assert [(rec.seq, enc) for rec, enc in page] == [
        (7, '{"$seq":7,"$ts":107,"data":"7"}'),
        (8, '{"$seq":8,"$ts":108,"data":"8"}'),
    ]


def test_the_cache_pages_under_upto_and_the_byte_budget():
    t = tailer(5, 9)
    assert [rec.seq for rec, _ in t.cached(4, 10, 1 << 20, ALL, 7)] == [5, 6, 7]
    one = len('{"$seq":5,"$ts":105,"data":"5"}')
    assert [rec.seq for rec, _ in t.cached(4, 10, 2 * one, ALL, 9)] == [5, 6]
    assert t.cached(9, 10, 1 << 20, ALL, 9) == []  # at the head: an empty page, not "unknown"


def test_encodings_are_made_once_per_flags():
    t = tailer(1, 1)
    first = t.cached(0, 1, 1 << 20, (False, False, True), 1)[0][1]
    assert first == '{"$seq":1,"$ts":101,"data":"1"}'
    assert t.cached(0, 1, 1 << 20, (False, False, True), 1)[0][1] is first
    assert t.cached(0, 1, 1 << 20, (False, False, False), 1)[0][1] == '{"$seq":1,"$ts":101}'


@pytest.mark.parametrize(
    "setup, after",
    [
        (lambda t: setattr(t, "cache_after", None), 5),  # not filled yet
        (lambda t: setattr(t, "deleted", True), 5),  # the topic is gone
        (lambda t: None, 3),  # older than the cache (seq 4 not in it)
        (lambda t: setattr(t, "earliest", 7), 5),  # seq 6 is trimmed: a tombstone is due
    ],
)
def test_the_cache_cannot_say(setup, after):
    t = tailer(5, 9)
    setup(t)
    assert t.cached(after, 10, 1 << 20, ALL, 9) is None


def test_a_seq_written_again_with_another_ts_is_a_rewind_sign():
    t = tailer(5, 9)  # seq s cached with $ts 100 + s
    assert not t.rewritten(7, 107)  # the same append heard twice (a read, then its notice)
    assert t.rewritten(7, 999)  # the source wrote 7 again: it went back
    assert not t.rewritten(4, 999) and not t.rewritten(10, 999)  # outside the cache: unknown
    assert t.cached(12, 10, 1 << 20, ALL, 9) is None  # above the head: PostgreSQL decides
    t.rewound_to += [8, 6, 7]
    assert t.rewinds_since(0) == (3, 6) and t.rewinds_since(2) == (3, 7)
    assert t.rewinds_since(3) == (3, None)
