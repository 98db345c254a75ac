"""backfill's writes to the Iceberg audit log: new seqs by append, better copies of seqs it
already holds by ``MERGE INTO`` on (topic, seq); one row per topic+seq stays the invariant.

Only the audit log's rows of the fresh seqs are read: per topic, bounded by the fresh rows'
lowest and highest seq, which Iceberg turns into file pruning (the table is written ordered by
topic and seq, so each data file covers a narrow seq range). The cost follows the run's new
records, not the size of the day they land in.

Re-running is exact: a seq the audit log already holds with the chosen copy is neither
appended nor merged again, so a step killed between its append and its merge and run again
writes only what is still missing.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.common import step_cache
from spark_jobs.common.seq_ranges import inside
from spark_jobs.steps.backfill.transforms import merge_audit_log
from spark_jobs.warehouse import tables
from spark_jobs.warehouse.schemas import AUDIT_LOG, columns, conform
from spark_jobs.warehouse.warehouse import Warehouse


def seq_bounds(rows: DataFrame) -> list[tuple[str, int, int]]:
    return [
        (r["topic"], r["lo"], r["hi"])
        for r in rows.groupBy("topic")
        .agg(F.min("seq").alias("lo"), F.max("seq").alias("hi"))
        .collect()
    ]


def changes(fresh: DataFrame, existing: DataFrame) -> DataFrame:
    """Per fresh key, the row the audit log must hold and whether it is ``new`` (absent) or
    ``changed`` (present with another copy); keys already right are left out (pure)."""
    merged = merge_audit_log(fresh, existing)
    old = conform(existing, AUDIT_LOG).select(
        "topic", "seq", F.col("data_sha256").alias("old_hash"), F.col("origin").alias("old_origin")
    )
    joined = merged.join(old, on=["topic", "seq"], how="left")
    kind = (
        F.when(F.col("old_hash").isNull(), F.lit("new"))
        .when(
            (F.col("old_hash") != F.col("data_sha256")) | (F.col("old_origin") != F.col("origin")),
            F.lit("changed"),
        )
        .otherwise(F.lit(None))
    )
    return (
        joined.withColumn("change", kind)
        .filter(F.col("change").isNotNull())
        .select(*columns(AUDIT_LOG), "change")
    )


def write_audit_log(
    warehouse: Warehouse,
    fresh: DataFrame,
    hook: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Write ``fresh`` (rows with a ``rank``) to the audit log; returns the counts."""
    fresh = step_cache.cache(fresh)
    bounds = seq_bounds(fresh)
    if not bounds:
        return {"appended": 0, "merged": 0}
    # Pinned: ``todo`` is cached and outlives the append below (the MERGE reads it).
    existing = conform(warehouse.pinned("audit_log").filter(inside(bounds)), AUDIT_LOG).join(
        fresh.select("topic", "seq").distinct(), on=["topic", "seq"], how="left_semi"
    )
    run_id = warehouse.layout.run_id
    todo = step_cache.cache(changes(fresh, existing).withColumn("run_id", F.lit(run_id)))
    counts = {
        r["change"]: r["n"] for r in todo.groupBy("change").agg(F.count("*").alias("n")).collect()
    }
    appended, merged = counts.get("new", 0), counts.get("changed", 0)
    if appended:
        warehouse.append(
            "audit_log",
            todo.filter(F.col("change") == "new").drop("change"),
            {tables.RUN_PROPERTY: run_id, tables.STEP_PROPERTY: "backfill.append"},
        )
    if hook:
        hook("backfill.merging")
    if merged:
        updates = todo.filter(F.col("change") == "changed").drop("change")
        warehouse.merge("audit_log", updates, seq_bounds(updates))
    todo.unpersist()
    fresh.unpersist()
    return {"appended": appended, "merged": merged}
