"""Seq ranges in Spark, the rules several steps share: contiguous runs of seqs per topic (the
bounded source reads of reconcile and backfill) and "inside these ranges" as a column predicate
(backfill's audit-log reads, verify's)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F


def seq_runs(late: DataFrame) -> DataFrame:
    """Contiguous runs of late seqs per topic, (topic, lo, hi) with lo exclusive: the bounded
    source read (a re-sent stretch is one run, whatever its length)."""
    seqs = late.select("topic", "seq").distinct()
    island = F.col("seq") - F.row_number().over(Window.partitionBy("topic").orderBy("seq"))
    return (
        seqs.withColumn("island", island)
        .groupBy("topic", "island")
        .agg((F.min("seq") - 1).alias("lo"), F.max("seq").alias("hi"))
        .drop("island")
    )


def inside(bounds: list[tuple[str, int, int]], prefix: str = "") -> Column:
    """True for rows whose (topic, seq) lies in one of ``bounds`` (topic, lo, hi inclusive)."""
    cond = F.lit(False)
    for topic, lo, hi in bounds:
        cond = cond | ((F.col(f"{prefix}topic") == topic) & F.col(f"{prefix}seq").between(lo, hi))
    return cond
