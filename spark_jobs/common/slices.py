"""One run's slice of the warehouse, as DataFrames, for the Great Expectations checks: the
deliveries it reconciled (its delivery batches, from ``reconcile_runs``), its summary, detail
and remaining defects (its partitions of those Iceberg tables), and the audit-log rows it
wrote (``run_id`` in the audit log). A slice that is empty comes back as an empty DataFrame of
the right schema, so a suite runs the same on a quiet interval."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import store
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.schemas import AUDIT_LOG, DELIVERIES, DETAIL, LEFT, SUMMARY, conform
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs


def quality_frames(spark: SparkSession, layout: Layout, database_url: str) -> dict[str, DataFrame]:
    """Suite name -> this run's rows."""
    wh = Warehouse.attach(spark, layout, database_url)
    with store.connect(database_url) as conn:
        first, last = runs.run_batches(conn, layout.run_id) or (1, 0)
    run = layout.run_id
    return {
        "deliveries": conform(
            wh.read("deliveries").filter(F.col("batch").between(first, last)),
            DELIVERIES,
        ),
        "reconciliation": conform(wh.run_rows("summary", run), SUMMARY),
        "detail": conform(wh.run_rows("detail", run), DETAIL),
        "remaining": conform(wh.run_rows("remaining", run), LEFT),
        "audit_log": conform(wh.read("audit_log").filter(F.col("run_id") == run), AUDIT_LOG),
    }
