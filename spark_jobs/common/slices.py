"""One run's slice of the warehouse, as DataFrames, for the Great Expectations checks: the
deliveries it reconciled, its summary, detail and remaining defects, and the audit-log
partitions it wrote (from ``runs/<id>/manifest.json``). A slice that is empty comes back as
an empty DataFrame of the right schema, so a suite runs the same on a quiet interval."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.common import storage, warehouse
from spark_jobs.common.schemas import AUDIT_LOG, DELIVERIES, DETAIL, SUMMARY
from spark_jobs.layout import Layout
from spark_jobs.verify.transforms import LEFT


def _run_table(spark: SparkSession, path, schema) -> DataFrame:
    if not storage.data_files(path):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(str(path))


def quality_frames(spark: SparkSession, layout: Layout) -> dict[str, DataFrame]:
    """Suite name -> this run's rows."""
    manifest = storage.read_json(layout.manifest, {})
    return {
        "deliveries": warehouse.read_files(
            spark, layout.deliveries, manifest.get("deliveries", []), DELIVERIES
        ),
        "reconciliation": _run_table(spark, layout.run_path("summary"), SUMMARY),
        "detail": _run_table(spark, layout.run_path("detail"), DETAIL),
        "remaining": _run_table(spark, layout.run_path("remaining"), LEFT),
        "audit_log": warehouse.read_partitions(
            spark, layout.audit_log, manifest.get("audit_partitions", []), AUDIT_LOG
        ),
    }
