"""Pruning a warehouse's runs (``spark_jobs.lifecycle.prune``, what the runner and the DAG's
``finish_run`` call), on real Iceberg tables and a real PostgreSQL: five cheap runs, each one
row in every run-partitioned table written through the jobs' own table module (as each step
writes its partition) and a reconcile commit; keep 2. Exactly the oldest 3 runs' partitions of
``detail``, ``summary`` and ``remaining`` and their run-table rows go, the ledger's rows of
those runs move to its one partition of pruned runs, and each kept run still reads its tables as
it left them (time travel)."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from spark_jobs import lifecycle
from spark_jobs.common import plan_size
from spark_jobs.warehouse import readers, tables
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs

from ..support import unique
from .warehouse import NO_DISTRIBUTION

pytestmark = pytest.mark.spark
RUN_TABLES = ("detail", "summary", "remaining", "ledger")
RUNS, KEEP = 5, 2
VALUES: dict[type, object] = {
    StringType: "x",
    LongType: 1,
    IntegerType: 1,
    BooleanType: False,
    DateType: dt.date(2026, 1, 1),
    TimestampType: dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
}


def value(kind: DataType) -> object:
    return [] if isinstance(kind, ArrayType) else VALUES[type(kind)]


def one_row(schema: StructType) -> tuple:
    """A row of ``schema``: NULL where it may be, else a plain value of the field's type."""
    return tuple(None if f.nullable else value(f.dataType) for f in schema.fields)


def run_ids(layout: Layout, url: str, name: str, snapshot: int | None = None) -> set[str]:
    table = readers.load(layout, url, name)
    scan = table.scan(snapshot_id=snapshot) if snapshot else table.scan()
    return set(scan.to_arrow()[tables.run_column(name)].to_pylist())


def test_pruning_keeps_the_newest_runs_and_their_time_travel(spark, pg_url, tmp_path):
    prefix = unique("prune")
    ids = [f"{prefix}-{i}" for i in range(RUNS)]
    layout = Layout("", str(tmp_path / "warehouse"), ids[-1])
    wh = Warehouse.attach(spark, layout, pg_url)
    snapshots: dict[str, dict[str, int]] = {}
    # One-row commits: nothing to distribute.
    with plan_size.settings(spark, {NO_DISTRIBUTION: "none"}):
        for i, run_id in enumerate(ids):
            with psycopg.connect(pg_url, autocommit=True) as conn:
                runs.start_run(conn, run_id, layout.catalog)
            for name in RUN_TABLES:
                rows = spark.createDataFrame(
                    [one_row(tables.SCHEMAS[name][0])], tables.SCHEMAS[name][0]
                )
                wh.replace_run(name, run_id, rows)
            snapshots[run_id] = wh.snapshots(RUN_TABLES)
            with psycopg.connect(pg_url, autocommit=True) as conn:
                window = ("c1", "t", 0, 10 * i, 10 * i + 10, None)
                summary = ("c1", "t", "delivered", 10, 0)
                runs.commit_reconcile(
                    conn, layout.catalog, run_id, (i, i), False, [window], [summary]
                )
                runs.record_snapshots(conn, run_id, layout.catalog, snapshots[run_id])
                runs.finish_run(conn, run_id, True, 0, 0)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        before = runs.cumulative_summary(conn, layout.catalog)

    removed = lifecycle.prune(pg_url, layout, KEEP)

    pruned, kept = ids[: RUNS - KEEP], ids[RUNS - KEEP :]
    assert removed == pruned[::-1]
    for name in lifecycle.PRUNED_TABLES:
        assert run_ids(layout, pg_url, name) == set(kept), name
    # The pruned runs' ledger rows live on in one partition (late copies are judged against
    # them): the ledger no longer gains a partition with every run.
    assert run_ids(layout, pg_url, "ledger") == {*kept, tables.PRUNED_LEDGER}
    archived = readers.load(layout, pg_url, "ledger").scan().to_arrow()
    assert archived["run_id"].to_pylist().count(tables.PRUNED_LEDGER) == len(pruned)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for table in ("pipeline_runs", "reconcile_runs"):
            rows = conn.execute(
                f"SELECT run_id FROM {table} WHERE warehouse = %s", (layout.catalog,)
            ).fetchall()
            assert {r for (r,) in rows} == set(kept), table
        assert runs.cumulative_summary(conn, layout.catalog) == before
        # Time travel: each kept run reads every table as it left it.
        for run_id in kept:
            found = runs.run_snapshots(conn, run_id)
            assert found is not None and found[1] == snapshots[run_id]
            upto = set(ids[: ids.index(run_id) + 1])
            for name in RUN_TABLES:
                assert run_ids(layout, pg_url, name, found[1][name]) == upto, (run_id, name)
    assert lifecycle.prune(pg_url, layout, KEEP) == []  # nothing more: no commit, no delete
