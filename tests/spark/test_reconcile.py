"""reconcile's rules on one literal world (one Spark run, many small assertions).

Source: ``orders`` seqs 1..12 (4 and 9 from node web-1); ``trimmed`` lost 1..5 to its cap,
keeps 6..10; ``gone`` was deleted at head 4 and recreated (5..6); ``ranges`` seqs 1..20.
Each consumer below exercises a few rules; the comments say which.
"""

from __future__ import annotations

import pytest

from spark_jobs.common import statuses as st
from spark_jobs.steps.compact.transforms import compact
from spark_jobs.steps.reconcile.transforms import reconcile, summarize
from spark_jobs.warehouse.schemas import GAPS, LANDING, SOURCE_RECORDS

from .builders import Stream, payload, sha

pytestmark = pytest.mark.spark

SOURCE = (
    [("orders", s, "web-1" if s in (4, 9) else None) for s in range(1, 13)]
    + [("trimmed", s, None) for s in range(6, 11)]
    + [("gone", s, None) for s in (5, 6)]
    + [("ranges", s, None) for s in range(1, 21)]
)
GAP_ROWS = [("trimmed", 1, 5, "cap"), ("gone", 1, 4, "deleted")]


def streams() -> list[Stream]:
    # Started at 0 and got everything: no defects at all.
    perfect = (
        Stream("perfect", {"orders": 0})
        .records("orders", [1, 2, 3])
        .records("orders", [4, 5, 6, 7, 8])
        .records("orders", [9, 10, 11, 12])
        .caught_up("orders", 12)
    )
    # Filters web-1 (4, 9); a duplicate (6); a corrupted copy (7); a tombstone over a seq
    # that exists (8); 11 and 12 never arrive; 13 has no source at all.
    faulty = (
        Stream("faulty", {"orders": 0}, filter_node="web-1")
        .records("orders", [1, 2, 3])
        .records("orders", [5, 6], cursor=6)
        .records("orders", [6])
        .records("orders", [7], data={7: '{"n":"corrupt"}'})
        .tombstone("orders", 8, 8)
        .records("orders", [10])
        .caught_up("orders", 12)
        .records("orders", [13])
    )
    # Watermark 5: seq 5 is due, 6.. are not.
    late = Stream("late", {"orders": 0}).records("orders", [1, 2, 3, 4, 5])
    # Subscribed orders at 6 (the session map in its first frame's id says so); missed 7.
    tail = (
        Stream("tail", {"orders": 6, "trimmed": 0})
        .tombstone("trimmed", 1, 5)
        .records("trimmed", [6, 7, 8, 9, 10])
        .records("orders", [8, 9, 10, 11, 12])
    )
    # Got 1..3 before the cap trimmed them; 4..5 vanished without a tombstone.
    trimmer = (
        Stream("trimmer", {"trimmed": 0})
        .records("trimmed", [1, 2, 3])
        .records("trimmed", [6, 7, 8, 9, 10])
    )
    # Filters a node; trimmed 1..5 never arrived and were never signalled: can't tell.
    filt = (
        Stream("filt", {"orders": 12, "trimmed": 0}, filter_node="web-1")
        .caught_up("orders", 12)
        .records("trimmed", [6, 7, 8, 9, 10])
    )
    # Deletion signalled by topic-deleted (3..4), then the recreated topic's 5..6.
    deleted = (
        Stream("deleted", {"gone": 0})
        .records("gone", [1, 2])
        .topic_deleted("gone", 4)
        .records("gone", [5, 6])
    )
    # Same, but it never got topic-deleted: 3..4 were never signalled.
    unsignalled = Stream("unsignalled", {"gone": 0}).records("gone", [1, 2]).records("gone", [5, 6])
    # Tombstone 5..7 exactly: 4 (dropped, cursor 4) and 8 (dropped) are silent gaps.
    tomb = (
        Stream("tomb", {"ranges": 0})
        .records("ranges", [1, 2, 3], cursor=4)
        .tombstone("ranges", 5, 7)
        .records("ranges", [9, 10])
        .records("ranges", list(range(11, 21)))
    )
    # Lost the frame of 2 just before the deletion: its range starts after the sink's cursor
    # (2), which the lost frame moved, not after the last landed frame's (1).
    lost = (
        Stream("lost", {"gone": 0})
        .records("gone", [1])
        .records("gone", [2])
        .topic_deleted("gone", 4, sink_cursor=True)
        .records("gone", [5, 6])
        .lose_frame(2)
    )
    return [perfect, faulty, late, tail, trimmer, filt, deleted, unsignalled, tomb, lost]


@pytest.fixture(scope="module")
def world(spark):
    rows = [r for s in streams() for r in s.rows]
    landing = spark.createDataFrame(rows, LANDING)
    records = spark.createDataFrame(
        [(t, s, 1_000 + s, None, n, None, payload(s, t)) for t, s, n in SOURCE], SOURCE_RECORDS
    )
    gaps = spark.createDataFrame(GAP_ROWS, GAPS)
    detail = reconcile(compact(landing).cache(), records, gaps).cache()
    statuses = {
        (r.consumer, r.topic, s): (r.status, r.copies)
        for r in detail.collect()
        for s in range(r.seq, r.seq_to + 1)
    }
    summary = {
        (r.consumer, r.topic, r.status): r["count"] for r in summarize(detail, "run-1").collect()
    }
    assert all(r.revised == 0 for r in summarize(detail, "run-1").collect())
    return statuses, summary


def seqs(world, consumer: str, topic: str, status: str | None = None) -> list[int]:
    statuses, _ = world
    return sorted(
        s
        for (c, t, s), (got, _) in statuses.items()
        if c == consumer and t == topic and (status is None or got == status)
    )


def test_started_at_zero_and_got_everything_has_no_defects(world):
    assert seqs(world, "perfect", "orders") == list(range(1, 13))
    assert seqs(world, "perfect", "orders", st.DELIVERED) == list(range(1, 13))


def test_filtered_by_node(world):
    assert seqs(world, "faulty", "orders", st.FILTERED) == [4, 9]


def test_duplicate_is_delivered_once_plus_a_duplicate_count(world):
    statuses, summary = world
    assert statuses[("faulty", "orders", 6)] == (st.DELIVERED, 2)
    assert summary[("faulty", "orders", st.DUPLICATE)] == 1
    assert ("perfect", "orders", st.DUPLICATE) not in summary


def test_mismatch_when_no_copy_matches(world):
    assert seqs(world, "faulty", "orders", st.MISMATCH) == [7]


def test_tombstone_covers_exactly_its_range(world):
    assert seqs(world, "faulty", "orders", st.TOMBSTONED) == [8]
    assert seqs(world, "tomb", "ranges", st.TOMBSTONED) == [5, 6, 7]
    assert seqs(world, "tomb", "ranges", st.SILENT_GAP) == [4, 8]


def test_silent_gap_and_phantom(world):
    assert seqs(world, "faulty", "orders", st.SILENT_GAP) == [11, 12]
    assert seqs(world, "faulty", "orders", st.PHANTOM) == [13]


def test_watermark_boundary(world):
    assert seqs(world, "late", "orders") == [1, 2, 3, 4, 5]


def test_start_comes_from_the_previous_frame_id(world):
    # orders' first frame is [8..12], but the frame before it says the cursor was 6.
    assert seqs(world, "tail", "orders") == [7, 8, 9, 10, 11, 12]
    assert seqs(world, "tail", "orders", st.SILENT_GAP) == [7]
    assert seqs(world, "tail", "trimmed", st.TOMBSTONED) == [1, 2, 3, 4, 5]


def test_trimmed_after_delivery_and_unsignalled_trim(world):
    assert seqs(world, "trimmer", "trimmed", st.TRIMMED_AFTER_DELIVERY) == [1, 2, 3]
    assert seqs(world, "trimmer", "trimmed", st.SILENT_GAP) == [4, 5]
    assert seqs(world, "trimmer", "trimmed", st.DELIVERED) == [6, 7, 8, 9, 10]


def test_trimmed_and_unsignalled_with_a_node_filter_is_unverifiable(world):
    assert seqs(world, "filt", "trimmed", st.UNVERIFIABLE) == [1, 2, 3, 4, 5]
    assert seqs(world, "filt", "orders") == []


def test_deleted_and_recreated_topic(world):
    assert seqs(world, "deleted", "gone", st.TRIMMED_AFTER_DELIVERY) == [1, 2]
    assert seqs(world, "deleted", "gone", st.TOMBSTONED) == [3, 4]
    assert seqs(world, "deleted", "gone", st.DELIVERED) == [5, 6]
    assert seqs(world, "unsignalled", "gone", st.SILENT_GAP) == [3, 4]


def test_a_frame_lost_just_before_a_deletion_is_a_silent_gap(world):
    assert seqs(world, "lost", "gone", st.TRIMMED_AFTER_DELIVERY) == [1]
    assert seqs(world, "lost", "gone", st.SILENT_GAP) == [2]
    assert seqs(world, "lost", "gone", st.TOMBSTONED) == [3, 4]
    assert seqs(world, "lost", "gone", st.DELIVERED) == [5, 6]


def test_exactly_one_status_per_seq_and_summary_adds_up(world):
    statuses, summary = world
    per_status = {}
    for (c, t, _), (status, _) in statuses.items():
        per_status[(c, t, status)] = per_status.get((c, t, status), 0) + 1
    assert {k: v for k, v in summary.items() if k[2] != st.DUPLICATE} == per_status
    assert summary[("faulty", "orders", st.DELIVERED)] == 6


def test_no_gaps_leaves_the_gap_side_out_with_the_same_verdicts(spark):
    """``gaps=None`` (the caller read the windows' gaps rows and found none) judges exactly as
    an empty ``gaps`` frame does, and the hashes come back as lower-case hex digests."""
    chosen = {"perfect", "faulty", "late"}
    rows = [r for s in streams() if s.consumer in chosen for r in s.rows]
    deliveries = compact(spark.createDataFrame(rows, LANDING)).cache()
    records = spark.createDataFrame(
        [(t, s, 1_000 + s, None, n, None, payload(s, t)) for t, s, n in SOURCE if t == "orders"],
        SOURCE_RECORDS,
    )
    empty = spark.createDataFrame([], GAPS)
    with_gaps = sorted(reconcile(deliveries, records, empty).collect())
    without = sorted(reconcile(deliveries, records, None).collect())
    assert without == with_gaps
    corrupt = [r for r in without if r.consumer == "faulty" and r.seq == 7]
    assert [(r.status, r.source_hash, r.delivered_hash) for r in corrupt] == [
        (st.MISMATCH, sha(payload(7, "orders")), sha('{"n":"corrupt"}'))
    ]
    deliveries.unpersist()
