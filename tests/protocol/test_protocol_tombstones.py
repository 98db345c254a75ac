"""Unit tests for tombstone arithmetic: the missed range and the consumer-facing reason."""

from __future__ import annotations

import pytest

from watch_service.protocol.tombstones import Tombstone, consumer_reason, missed_range

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "cursor, earliest, expected",
    [
        (0, 1, None),  # empty or untrimmed topic: nothing missed
        (0, 2, (1, 1)),
        (0, 11, (1, 10)),
        (4, 11, (5, 10)),
        (9, 11, (10, 10)),
        (10, 11, None),  # exactly at the edge
        (50, 11, None),  # ahead of earliest
    ],
)
def test_missed_range(cursor, earliest, expected):
    assert missed_range(cursor, earliest) == expected


@pytest.mark.parametrize(
    "stored, reason",
    [
        (["cap"], "cap"),
        (["ttl"], "ttl"),
        (["deleted"], "recreated"),
        (["cap", "cap"], "cap"),
        (["deleted", "deleted"], "recreated"),
        (["cap", "ttl"], "mixed"),
        (["cap", "deleted"], "mixed"),
        (["ttl", "deleted", "cap"], "mixed"),
    ],
)
def test_consumer_reason(stored, reason):
    assert consumer_reason(stored) == reason
    assert consumer_reason(iter(stored)) == reason  # any iterable, consumed once


def test_tombstone_as_dict_is_the_contract_shape():
    assert Tombstone("cap", 1, 10).as_dict() == {"reason": "cap", "gap_from": 1, "gap_to": 10}
