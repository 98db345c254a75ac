"""The maintenance step on a warehouse of 30 one-row audit-log commits (two topics, one day:
two partitions of 15 files each) and two compact commits to the deliveries table, with a zero
retention so that everything is old: the small files become one per partition, no row changes,
the snapshot a run within the retention references survives expiry (time travel to it still
reads), an older run's does not, compact's state survives the rewrite and the expiry, and a
crashed writer's stray file is removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
import pytest

from spark_jobs.steps.maintenance import main as maintenance
from spark_jobs.warehouse import maintenance as plan
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.warehouse import Warehouse

from ..support import unique
from .warehouse import build

pytestmark = pytest.mark.spark
APPENDS = 30
KEPT = 14  # runs[KEPT] started within the retention: snapshots[KEPT] must stay readable


def test_expiry_stops_at_the_oldest_snapshot_it_must_keep():
    committed = {1: 100, 2: 200, 3: 300}
    assert plan.expiry(250, committed, []) == plan.Expiry(250, "retention cutoff")
    assert plan.expiry(250, committed, [3, 2, 99]) == plan.Expiry(200, "a run's snapshot 2")
    assert plan.expiry(250, committed, [3], compact_snapshot=1) == plan.Expiry(
        100, "compact's state 1"
    )
    assert plan.orphans_before(10 * plan.ORPHAN_MIN_AGE_MS, 10**12) == 9 * plan.ORPHAN_MIN_AGE_MS
    assert plan.timestamp_sql(1_795_680_000_123) == "TIMESTAMP '2026-11-26 08:00:00.123'"


def _files_per_partition(spark, name: str) -> dict[str, int]:
    rows = spark.sql(f"SELECT partition.topic, count(*) FROM {name}.data_files GROUP BY 1")
    return {r[0]: int(r[1]) for r in rows.collect()}


def test_maintenance_compacts_expires_and_keeps_what_runs_need(spark, pg_url, tmp_path):
    house = build(spark, pg_url, str(tmp_path / "work"), APPENDS, unique("m"))
    layout, audit = house.layout, house.layout.table("audit_log")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # Retention 0: the cutoff is now. One run started within it (after the cutoff), the
        # others a month ago: only runs[KEPT]'s snapshot is protected.
        conn.execute(
            "UPDATE pipeline_runs SET started_at = CASE WHEN run_id = %s "
            "THEN now() + interval '1 hour' ELSE now() - interval '30 days' END "
            "WHERE run_id = ANY(%s)",
            (house.run_ids[KEPT], house.run_ids),
        )
    before = readers.audit_log(layout, pg_url).to_pylist()
    wh = Warehouse.open(layout, pg_url, spark=spark)
    compact_before = wh.compact_state()
    assert compact_before == house.compact_state
    assert _files_per_partition(spark, audit) == dict.fromkeys(house.topics, APPENDS // 2)
    location = readers.load(layout, pg_url, "audit_log").location().removeprefix("file:")
    stray = Path(location) / "data" / "stray-from-a-crashed-writer.parquet"
    stray.write_bytes(b"not referenced by any snapshot")
    os.utime(stray, (time.time() - 2 * 86400, time.time() - 2 * 86400))

    args = maintenance.build_parser().parse_args(
        ["--work", layout.work, "--database-url", pg_url, "--snapshot-retention-hours", "0"]
    )
    figures = maintenance.run(spark, args)

    per = figures["tables"]
    assert sorted(per) == ["audit_log", "deliveries"]  # the others were never written
    compact_snap = wh.compact_snapshot()["snapshot_id"]
    assert {k: v for k, v in per["audit_log"].items() if k != "seconds"} == {
        "files_before": APPENDS,
        "files_after": 2,
        "snapshots_expired": KEPT,  # snapshots[0 .. KEPT-1]
        "orphans_removed": 1,
        "kept_from": f"a run's snapshot {house.snapshots[KEPT]}",
    }
    assert {k: v for k, v in per["deliveries"].items() if k != "seconds"} == {
        "files_before": 2,
        "files_after": 1,
        "snapshots_expired": 1,
        "orphans_removed": 0,
        "kept_from": f"compact's state {compact_snap}",
    }
    assert (figures["files_before"], figures["files_after"]) == (APPENDS + 2, 3)
    # One data file per partition now (the bound: every partition's files fit in one target
    # file), the same rows, and the protected run's view of the table still readable.
    assert _files_per_partition(spark, audit) == dict.fromkeys(house.topics, 1)
    assert readers.audit_log(layout, pg_url).to_pylist() == before
    as_run_left_it = readers.audit_log(layout, pg_url, snapshot_id=house.snapshots[KEPT])
    assert as_run_left_it.num_rows == KEPT + 1
    assert as_run_left_it.to_pylist() == sorted(
        before[:0] + [r for r in before if r["run_id"] <= house.run_ids[KEPT]],
        key=lambda r: (r["topic"], r["seq"]),
    )
    kept = {s.snapshot_id for s in readers.load(layout, pg_url, "audit_log").snapshots()}
    assert house.snapshots[KEPT - 1] not in kept and set(house.snapshots[KEPT:]) <= kept
    assert wh.compact_state() == compact_before
    assert not stray.exists()
