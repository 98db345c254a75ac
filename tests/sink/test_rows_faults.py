"""Frames → landing rows, and deterministic fault selection."""

import orjson
import pytest

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol.landing import COLUMN_NAMES, payload_hash
from watch_service.sink.faults import (
    CORRUPT,
    DROP,
    FaultBook,
    FaultPolicy,
    corrupt_data,
)
from watch_service.sink.rows import FrameContext, FrameError, frame_rows

pytestmark = pytest.mark.unit


def ctx(frame_no: int = 7, cursors: dict | None = None) -> FrameContext:
    frame_id = cursor_codec.encode(cursors or {"a": 3, "b": 9})
    return FrameContext("c1", "n1", frame_no, frame_id, 1000)


def as_dicts(rows):
    return [dict(zip(COLUMN_NAMES, r)) for r in rows]


RECORD_FRAME = {
    "topic": "a",
    "from_seq": 1,
    "to_seq": 3,
    "head_seq": 10,
    "records": [
        {"$seq": 2, "$ts": 11, "$tag": "t2", "$node": "w", "meta": {"m": 1}, "data": {"x": 1.5}},
        {"$seq": 3, "$ts": 12, "data": [1, "é"]},
    ],
}


def test_record_frame_one_row_per_record():
    landed = frame_rows("record", RECORD_FRAME, ctx(), {"a": 1})
    rows = as_dicts(landed.rows)
    assert [r["seq"] for r in rows] == [2, 3]
    first = rows[0]
    assert first == {
        "consumer": "c1",
        "filter_node": "n1",
        "frame_no": 7,
        "frame_id": ctx().frame_id,
        "received_ms": 1000,
        "kind": "record",
        "topic": "a",
        "cursor": 3,
        "seq": 2,
        "ts": 11,
        "tag": "t2",
        "node": "w",
        "meta": '{"m":1}',
        "data": '{"x":1.5}',
        "data_sha256": payload_hash('{"x":1.5}'),
        "reason": None,
        "gap_from": None,
        "gap_to": None,
        "head_seq": 10,
    }
    assert rows[1]["tag"] is None and rows[1]["meta"] is None
    assert rows[1]["data"] == orjson.dumps([1, "é"]).decode()
    assert (landed.records, landed.duplicates, landed.cursor, landed.head_seq) == (2, 0, 3, 10)


def test_duplicates_are_records_at_or_below_the_previous_cursor():
    assert frame_rows("record", RECORD_FRAME, ctx(), {"a": 2}).duplicates == 1
    assert frame_rows("record", RECORD_FRAME, ctx(), {"a": 3}).duplicates == 2
    assert frame_rows("record", RECORD_FRAME, ctx(), {}).duplicates == 0


def test_tombstone_caught_up_topic_deleted_rows():
    tomb = {
        "topic": "b",
        "reason": "cap",
        "gap_from": 4,
        "gap_to": 9,
        "earliest_seq": 10,
        "head_seq": 20,
    }
    (row,) = as_dicts(frame_rows("tombstone", tomb, ctx(), {}).rows)
    assert (
        row["kind"],
        row["cursor"],
        row["reason"],
        row["gap_from"],
        row["gap_to"],
        row["head_seq"],
        row["seq"],
        row["data"],
    ) == ("tombstone", 9, "cap", 4, 9, 20, None, None)
    (row,) = as_dicts(frame_rows("caught-up", {"topic": "a", "head_seq": 3}, ctx(), {}).rows)
    assert (row["kind"], row["cursor"], row["head_seq"]) == ("caught-up", 3, 3)
    deleted = {"topic": "a", "head_seq": 3, "reason": "deleted"}
    (row,) = as_dicts(frame_rows("topic-deleted", deleted, ctx(), {}).rows)
    assert (row["kind"], row["reason"], row["gap_from"]) == ("topic-deleted", "deleted", None)
    # The range it signals starts after the sink's cursor before it, which lost frames moved.
    (row,) = as_dicts(frame_rows("topic-deleted", deleted, ctx(), {"a": 1}).rows)
    assert (row["gap_from"], row["gap_to"], row["head_seq"]) == (2, 3, 3)


def test_opaque_id_falls_back_to_frame_positions():
    opaque = FrameContext("c1", None, 1, "ckpt-1", 5)
    assert frame_rows("record", RECORD_FRAME, opaque, {}).cursor == 3
    tomb = {"topic": "b", "reason": "ttl", "gap_from": 1, "gap_to": 4, "head_seq": 9}
    assert frame_rows("tombstone", tomb, opaque, {}).rows[0][COLUMN_NAMES.index("cursor")] == 4


@pytest.mark.parametrize(
    "kind, payload",
    [
        ("record", []),
        ("record", {"topic": 1}),
        ("record", {"topic": "a", "records": None}),
        ("record", {"topic": "a", "records": [{"data": 1}]}),
        ("message", {"topic": "a"}),
    ],
)
def test_malformed_frames_raise(kind, payload):
    with pytest.raises(FrameError):
        frame_rows(kind, payload, ctx(), {})


def test_fault_fates_are_deterministic_per_seed_topic_seq():
    policy = FaultPolicy(drop_fraction=0.1, seed=42)
    fates = [policy.drops("a", s) for s in range(1, 5001)]
    assert fates == [FaultPolicy(0.1, 0, 42).drops("a", s) for s in range(1, 5001)]
    assert 400 < sum(fates) < 600
    assert fates != [FaultPolicy(0.1, 0, 43).drops("a", s) for s in range(1, 5001)]
    assert not FaultPolicy().enabled and FaultBook(FaultPolicy()).fate("a", 1) is None


def test_fault_book_caps_corruption_and_remembers_decisions():
    policy = FaultPolicy(drop_fraction=0.05, corrupt=5, seed=7)
    book = FaultBook(policy)
    fates = {s: book.fate("a", s) for s in range(1, 1001)}
    corrupted = [s for s, f in fates.items() if f == CORRUPT]
    assert len(corrupted) == 5 and corrupted[-1] > 20  # spread out, not the first five
    new = book.take_new()
    assert book.take_new() == []
    assert sorted(new) == sorted((f, "a", s) for s, f in fates.items() if f)
    # A restarted sink reloads the decisions: same fates for re-deliveries, no new corruption.
    again = FaultBook(policy, new)
    assert {s: again.fate("a", s) for s in range(1, 1001)} == fates
    assert again.take_new() == [] and again.counts[CORRUPT] == 5
    assert again.counts[DROP] == sum(1 for f in fates.values() if f == DROP)


def test_faulted_frame_rows():
    policy = FaultPolicy(drop_fraction=0.5, corrupt=100, seed=1)
    book = FaultBook(policy)
    records = [{"$seq": s, "$ts": s, "data": {"s": s}} for s in range(1, 201)]
    frame = {"topic": "a", "records": records, "from_seq": 0, "to_seq": 200, "head_seq": 200}
    landed = frame_rows("record", frame, ctx(cursors={"a": 200}), {}, book.fate)
    rows = as_dicts(landed.rows)
    faults = {(s, k) for k, _, s in book.take_new()}
    assert {s for s, k in faults if k == DROP}.isdisjoint(r["seq"] for r in rows)
    assert landed.dropped + len(rows) == 200 and landed.cursor == 200
    for r in rows:
        original = orjson.dumps({"s": r["seq"]}).decode()
        expected = corrupt_data(original) if (r["seq"], CORRUPT) in faults else original
        assert r["data"] == expected and r["data_sha256"] == payload_hash(expected)
    assert landed.corrupted == sum(1 for _, k in faults if k == CORRUPT) > 0
    assert orjson.loads(corrupt_data('{"s":1}')) == {"$fault": "corrupt", "data": {"s": 1}}
