"""backfill's audit-log rules and verify's repaired/remaining split, on literal tables."""

from __future__ import annotations

import datetime as dt

import pytest

from spark_jobs.common import statuses as st
from spark_jobs.steps.backfill.transforms import (
    delivered_rows,
    merge_audit_log,
    repair_keys,
    search_records,
    seq_ranges,
    source_rows,
)
from spark_jobs.steps.compact.transforms import compact
from spark_jobs.steps.verify.transforms import defect_report, remaining_defects
from spark_jobs.warehouse.schemas import AUDIT_LOG, DETAIL, LANDING, SOURCE_RECORDS

from .builders import Stream, payload, sha

pytestmark = pytest.mark.spark

TS = 1_700_000_000_000  # 2023-11-14 UTC
D = {s: payload(s) for s in range(1, 9)}


def detail_rows():
    h = {s: sha(D[s]) for s in D}
    return [
        ("c1", "t", 1, 1, st.DELIVERED, h[1], h[1], 1),
        ("c1", "t", 2, 2, st.SILENT_GAP, h[2], None, 0),  # c2 delivered it: its copy wins
        ("c1", "t", 3, 3, st.MISMATCH, h[3], sha("x"), 1),  # source copy backfilled
        ("c1", "t", 4, 4, st.TRIMMED_AFTER_DELIVERY, None, h[4], 1),
        ("c1", "t", 5, 5, st.PHANTOM, None, h[5], 1),  # never repairable
        ("c1", "t", 6, 6, st.SILENT_GAP, None, None, 0),  # source gone, never saved: remains
        ("c1", "t", 7, 7, st.SILENT_GAP, None, None, 0),  # source gone, saved by a past run
        ("c2", "t", 2, 2, st.DELIVERED, h[2], h[2], 1),
    ]


@pytest.fixture(scope="module")
def repaired(spark):
    c1 = (
        Stream("c1", {"t": 0})
        .records("t", [1])
        .records("t", [3], data={3: '{"n":"x"}'})
        .records("t", [4, 5])
    )
    c2 = Stream("c2", {"t": 1}).records("t", [2])
    deliveries = compact(spark.createDataFrame(c1.rows + c2.rows, LANDING)).cache()
    detail = spark.createDataFrame(detail_rows(), DETAIL)
    records = spark.createDataFrame(
        [("t", s, TS + s, "tag-3" if s == 3 else None, None, None, D[s]) for s in (1, 2, 3)],
        SOURCE_RECORDS,
    )
    old_day = dt.date(2023, 11, 14)
    existing = spark.createDataFrame(
        [
            ("t", 1, TS + 1, None, None, None, D[1], sha(D[1]), st.ORIGIN_BACKFILL, old_day),
            ("t", 7, TS + 7, None, None, None, D[7], sha(D[7]), st.ORIGIN_DELIVERED, old_day),
        ],
        AUDIT_LOG,
    )
    keys = repair_keys(detail)
    source = source_rows(records, keys)
    audit = merge_audit_log(delivered_rows(deliveries, detail).unionByName(source), existing)
    audit_rows = {r.seq: r for r in audit.collect()}
    search = sorted(tuple(r) for r in search_records(source).collect())
    remaining = remaining_defects(detail, audit)
    report = {
        (r.consumer, r.topic, r.status): (r.found, r.remaining, list(r.example_seqs))
        for r in defect_report(detail, remaining, examples=5).collect()
    }
    return audit_rows, search, report


def test_audit_log_keeps_the_best_copy_per_topic_and_seq(repaired):
    audit, _, _ = repaired
    assert {s: r.origin for s, r in audit.items()} == {
        1: st.ORIGIN_DELIVERED,
        2: st.ORIGIN_DELIVERED,
        3: st.ORIGIN_BACKFILL,
        4: st.ORIGIN_UNVERIFIED,
        7: st.ORIGIN_DELIVERED,
    }
    assert all(r.data == D[s] and r.data_sha256 == sha(D[s]) for s, r in audit.items())
    assert audit[3].tag == "tag-3"
    assert {r.date for r in audit.values()} == {dt.date(2023, 11, 14)}


def test_search_gets_the_source_copies_of_repaired_records(repaired):
    _, search, _ = repaired
    assert search == [("t", 2, TS + 2, None, D[2]), ("t", 3, TS + 3, "tag-3", D[3])]


def test_verify_counts_what_the_audit_log_does_not_repair(repaired):
    _, _, report = repaired
    assert report == {
        ("c1", "t", st.SILENT_GAP): (3, 1, [6]),
        ("c1", "t", st.MISMATCH): (1, 0, []),
        ("c1", "t", st.PHANTOM): (1, 1, [5]),
    }


def test_seq_ranges_compresses_runs_per_topic():
    keys = [("b", 5), ("a", 3), ("a", 1), ("a", 2), ("a", 7), ("b", 6), ("a", 2)]
    assert seq_ranges(keys) == [("a", 1, 3), ("a", 7, 7), ("b", 5, 6)]
