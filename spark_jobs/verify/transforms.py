"""verify: which defects are left after backfill.

A defect found by reconcile counts as repaired when the audit log, as backfill left it, holds
the record: a ``silent_gap`` or ``mismatch`` seq is repaired when the audit log has that
topic+seq with the source hash (or with any hash when the source row is already gone, i.e. an
earlier run saved it). This re-checks the written audit log rather than trusting that backfill
ran. A ``phantom`` is never repaired: nothing written can take back a delivery that has no
source. The pipeline fails its quality gate when anything remains.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.common import statuses as st
from spark_jobs.common.schemas import AUDIT_LOG, DETAIL, REMAINING, conform

GROUP = ["consumer", "topic", "status"]


def remaining_defects(detail: DataFrame, audit_log: DataFrame) -> DataFrame:
    """Detail rows of defects the audit log does not repair."""
    defects = conform(detail, DETAIL).filter(F.col("status").isin(*st.DEFECTS))
    keys = defects.select("topic", "seq").distinct()
    held = (conform(audit_log, AUDIT_LOG).select("topic", "seq", "data_sha256")
            .join(keys, on=["topic", "seq"], how="left_semi").alias("a"))
    d = defects.alias("d")
    repaired = ((F.col("d.topic") == F.col("a.topic")) & (F.col("d.seq") == F.col("a.seq"))
                & F.col("d.status").isin(*st.REPAIRABLE)
                & (F.col("d.source_hash").isNull()
                   | (F.col("d.source_hash") == F.col("a.data_sha256"))))
    return conform(d.join(held, on=repaired, how="left_anti"), DETAIL)


def defect_report(detail: DataFrame, remaining: DataFrame, examples: int = 5) -> DataFrame:
    """Per (consumer, topic, defect status): found, remaining and up to ``examples`` seqs."""
    found = (conform(detail, DETAIL).filter(F.col("status").isin(*st.DEFECTS))
             .groupBy(*GROUP).agg(F.count(F.lit(1)).alias("found")))
    left = conform(remaining, DETAIL)
    order = Window.partitionBy(*GROUP).orderBy("seq")
    firsts = (left.withColumn("n", F.row_number().over(order)).filter(F.col("n") <= examples)
              .groupBy(*GROUP).agg(F.count(F.lit(1)).alias("shown"),
                                   F.array_sort(F.collect_list("seq")).alias("example_seqs")))
    counts = left.groupBy(*GROUP).agg(F.count(F.lit(1)).alias("remaining"))
    report = (found.join(counts, on=GROUP, how="left").join(firsts, on=GROUP, how="left")
              .withColumn("remaining", F.coalesce("remaining", F.lit(0)))
              .withColumn("example_seqs", F.coalesce("example_seqs",
                                                     F.array().cast("array<bigint>"))))
    return conform(report, REMAINING)
