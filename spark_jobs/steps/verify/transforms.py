"""verify: which defects are left after backfill.

A defect found by reconcile counts as repaired when the audit log, as backfill left it, holds
the record: a ``silent_gap`` or ``mismatch`` seq is repaired when the audit log has that
topic+seq with the source hash (or with any hash when the source row is already gone, i.e. an
earlier run or another consumer saved it). A silent-gap *range* (seqs of a retention gap) is
repaired seq by seq the same way: what is left is its length minus the audit-log rows inside
it. This re-checks the written audit log rather than trusting that backfill ran. A
``phantom`` is never repaired: nothing written can take back a delivery that has no source.
The pipeline fails its quality gate when anything remains.

Detail rows carry the ``run_id`` whose verdict they are: a run checks its own defects and
those of earlier runs whose repairs are still open.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.common import statuses as st
from spark_jobs.warehouse.schemas import AUDIT_LOG, DETAIL, LEFT, REMAINING, conform

GROUP = ["run_id", "consumer", "topic", "status"]


def _with_run(detail: DataFrame) -> DataFrame:
    run = F.col("run_id") if "run_id" in detail.columns else F.lit("")
    return detail.select(
        *[F.col(f.name).cast(f.dataType) for f in DETAIL.fields], run.cast("string").alias("run_id")
    )


def remaining_defects(detail: DataFrame, audit_log: DataFrame) -> DataFrame:
    """Defect rows the audit log does not fully repair, with ``left`` seqs each."""
    defects = _with_run(detail).filter(F.col("status").isin(*st.DEFECTS))
    d = defects.withColumn("row", F.monotonically_increasing_id()).alias("d")
    a = conform(audit_log, AUDIT_LOG).select("topic", "seq", "data_sha256").alias("a")
    holds = (
        (F.col("d.topic") == F.col("a.topic"))
        & F.col("a.seq").between(F.col("d.seq"), F.col("d.seq_to"))
        & F.col("d.status").isin(*st.REPAIRABLE)
        & (F.col("d.source_hash").isNull() | (F.col("d.source_hash") == F.col("a.data_sha256")))
    )
    held = d.join(a, on=holds, how="inner").groupBy("d.row").agg(F.count(F.lit(1)).alias("held"))
    left = d.join(held, on="row", how="left").withColumn(
        "left", F.col("seq_to") - F.col("seq") + 1 - F.coalesce(F.col("held"), F.lit(0))
    )
    return conform(left.filter(F.col("left") > 0), LEFT)


def defect_report(detail: DataFrame, remaining: DataFrame, examples: int = 5) -> DataFrame:
    """Per (run, consumer, topic, defect status): found, remaining and up to ``examples``
    seqs (a range shows its first seq)."""
    found = (
        _with_run(detail)
        .filter(F.col("status").isin(*st.DEFECTS))
        .groupBy(*GROUP)
        .agg(F.sum(F.col("seq_to") - F.col("seq") + 1).alias("found"))
    )
    left = conform(remaining, LEFT)
    order = Window.partitionBy(*GROUP).orderBy("seq")
    firsts = (
        left.withColumn("n", F.row_number().over(order))
        .filter(F.col("n") <= examples)
        .groupBy(*GROUP)
        .agg(F.array_sort(F.collect_list("seq")).alias("example_seqs"))
    )
    counts = left.groupBy(*GROUP).agg(F.sum("left").alias("remaining"))
    report = (
        found.join(counts, on=GROUP, how="left")
        .join(firsts, on=GROUP, how="left")
        .withColumn("remaining", F.coalesce("remaining", F.lit(0)))
        .withColumn("example_seqs", F.coalesce("example_seqs", F.array().cast("array<bigint>")))
    )
    return conform(report, REMAINING)
