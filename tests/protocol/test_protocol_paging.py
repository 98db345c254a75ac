"""Unit tests for the page rule every reader shares: count, seq bound, byte budget."""

from __future__ import annotations

import pytest

from watch_service.protocol.paging import build_page
from watch_service.protocol.records import Record

pytestmark = pytest.mark.unit


def recs(*sizes: int, first: int = 1) -> list[Record]:
    """Records whose encoding (``enc`` below) is exactly ``size`` characters long."""
    return [Record(first + i, 0, None, None, None, "x" * size) for i, size in enumerate(sizes)]


def enc(rec: Record) -> str:
    return rec.data


def seqs(page: list[tuple[Record, str]]) -> list[int]:
    return [rec.seq for rec, _ in page]


def test_every_record_when_nothing_binds():
    page = build_page(recs(3, 4, 5), enc, limit=10, max_bytes=100, upto=99)
    assert [(rec.seq, text) for rec, text in page] == [(1, "xxx"), (2, "xxxx"), (3, "xxxxx")]


@pytest.mark.parametrize("limit, expected", [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (9, [1, 2, 3])])
def test_limit_caps_the_count(limit, expected):
    assert seqs(build_page(recs(1, 1, 1), enc, limit=limit, max_bytes=100, upto=99)) == expected


@pytest.mark.parametrize(
    "upto, expected", [(10, []), (11, [11]), (12, [11, 12]), (50, [11, 12, 13])]
)
def test_nothing_past_upto(upto, expected):
    page = build_page(recs(1, 1, 1, first=11), enc, limit=10, max_bytes=100, upto=upto)
    assert seqs(page) == expected


@pytest.mark.parametrize(
    "max_bytes, expected",
    [
        (9, [1, 2]),  # 4 + 5 = 9 fits exactly
        (8, [1]),  # the second record would make 9
        (12, [1, 2]),  # the third would make 15
        (15, [1, 2, 3]),
    ],
)
def test_byte_budget_counts_encoded_characters(max_bytes, expected):
    assert seqs(build_page(recs(4, 5, 6), enc, limit=10, max_bytes=max_bytes, upto=99)) == expected


def test_the_first_record_goes_out_however_large():
    assert seqs(build_page(recs(500, 1), enc, limit=10, max_bytes=10, upto=99)) == [1]


def test_empty_input_is_an_empty_page():
    assert build_page([], enc, limit=10, max_bytes=10, upto=99) == []


def test_only_considered_records_are_encoded():
    seen: list[int] = []

    def counting(rec: Record) -> str:
        seen.append(rec.seq)
        return rec.data

    build_page(recs(4, 4, 4, 4, 4), counting, limit=10, max_bytes=8, upto=99)
    assert seen == [1, 2, 3]  # the third is encoded to learn it does not fit; 4 and 5 never
    seen.clear()
    build_page(recs(1, 1, 1, 1), counting, limit=2, max_bytes=99, upto=99)
    assert seen == [1, 2]
    seen.clear()
    build_page(recs(1, 1, 1, 1), counting, limit=9, max_bytes=99, upto=2)
    assert seen == [1, 2]
