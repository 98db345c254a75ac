"""Earlier verdicts a run judges again with, or judges by.

Phantoms the head has passed: copies judged ``phantom`` because they were above the
source's head (``rewind.cap_scope``) are judged again once a window covers their seq, with
every copy they ever got, as a full audit over all history would judge them:

- the earlier copies (delivery batches already reconciled) join this run's copies in the
  window's judgement: matching content gives ``delivered``, other content ``mismatch`` or
  ``divergent``; a seq written later that no copy ever reached is a ``silent_gap`` as usual;
- the earlier ``phantom`` verdict is revised (``revised`` + 1), and the ledger gets the new
  verdict even when it is plain ``delivered`` (the newest ledger row is a seq's verdict).

Seqs that left the source after their verdict (retention, topic deletion): a full audit
judges them with the source hash their newest verdict held (``remembered``), so it agrees
with the incremental runs instead of calling them ``trimmed_after_delivery``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.common import statuses as st
from spark_jobs.steps.reconcile.scope import SCOPE
from spark_jobs.steps.reconcile.transforms import EXPECTED
from spark_jobs.warehouse.schemas import DELIVERIES, DETAIL, GAPS, LEDGER, conform
from watch_service.protocol.landing import KIND_RECORD


def phantoms_due(ledger: DataFrame, scope: DataFrame) -> DataFrame:
    """(consumer, topic, seq) whose current verdict is ``phantom`` and that this run's window
    ``lo < seq <= watermark`` covers."""
    newest = (
        conform(ledger, LEDGER)
        .filter(F.col("seq") == F.col("seq_to"))
        .groupBy("consumer", "topic", "seq")
        .agg(F.max_by("status", "judged_batch").alias("status"))
        .filter(F.col("status") == st.PHANTOM)
    )
    s = F.broadcast(conform(scope, SCOPE).select("consumer", "topic", "lo", "watermark"))
    return (
        newest.join(s, on=["consumer", "topic"], how="inner")
        .filter((F.col("seq") > F.col("lo")) & (F.col("seq") <= F.col("watermark")))
        .select("consumer", "topic", "seq")
    )


def earlier_copies(history: DataFrame, due: DataFrame) -> DataFrame:
    """The record copies of the due seqs in ``history`` (earlier delivery batches)."""
    d = conform(history, DELIVERIES).filter(F.col("kind") == F.lit(KIND_RECORD))
    return d.join(F.broadcast(due), on=["consumer", "topic", "seq"], how="left_semi")


def revisions(detail: DataFrame, due: DataFrame, judged_batch: int) -> tuple[DataFrame, DataFrame]:
    """(ledger rows of the due seqs now plain ``delivered``, summary deltas revising their
    phantoms); the window's own ledger rows hold their other verdicts."""
    judged = conform(detail, DETAIL).join(
        F.broadcast(due), on=["consumer", "topic", "seq"], how="left_semi"
    )
    ledger = conform(
        judged.filter(F.col("status") == st.DELIVERED).withColumn(
            "judged_batch", F.lit(judged_batch)
        ),
        LEDGER,
    )
    deltas = judged.groupBy("consumer", "topic").agg(
        F.lit(st.PHANTOM).alias("status"),
        F.lit(0).alias("count"),
        F.count(F.lit(1)).alias("revised"),
    )
    return ledger, deltas


def remembered(earlier: DataFrame, gaps: DataFrame, scope: DataFrame) -> DataFrame:
    """For a full audit: seqs in its windows that are in ``gaps`` now (retention, deletion)
    but that an earlier verdict judged while the source held them, as ``EXPECTED`` rows with
    that verdict's source hash. ``earlier``: committed runs' detail rows with an ``order``
    column (the newest verdict of a seq wins)."""
    newest = (
        earlier.filter(F.col("source_hash").isNotNull() & (F.col("seq") == F.col("seq_to")))
        .groupBy("consumer", "topic", "seq")
        .agg(F.max_by(F.struct("source_hash", "status"), "order").alias("v"))
    )
    g = F.broadcast(
        conform(gaps, GAPS).select(F.col("topic").alias("g_topic"), "gap_from", "gap_to")
    )
    gone = newest.join(
        g,
        on=(F.col("topic") == F.col("g_topic"))
        & F.col("seq").between(F.col("gap_from"), F.col("gap_to")),
        how="left_semi",
    )
    s = F.broadcast(conform(scope, SCOPE))
    rows = (
        gone.join(s, on=["consumer", "topic"], how="inner")
        .filter((F.col("seq") > F.col("lo")) & (F.col("seq") <= F.col("watermark")))
        .select(
            "scope_id",
            "seq",
            F.unhex(F.col("v.source_hash")).alias("source_hash"),
            (F.col("v.status") == st.FILTERED).alias("own_node"),
            F.col("filter_node").isNotNull().alias("filters"),
        )
    )
    return conform(rows, EXPECTED)
