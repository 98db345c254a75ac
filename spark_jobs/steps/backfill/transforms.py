"""backfill: the audit log — one row per topic+seq — merged from a run's verified deliveries,
source copies of what was missing or wrong, and the touched partitions' previous rows; and
the search documents for the repaired records.

Which copy of a topic+seq the audit log keeps, best first:

1. a delivered copy whose hash matches the source (``delivered``), from any consumer;
2. the source copy re-read from PostgreSQL for a ``silent_gap`` or ``mismatch`` seq
   (``backfill``);
3. the row the previous audit log held (it was verified when written; its source may since
   have been trimmed, so it cannot be rebuilt and must be carried forward);
4. a delivered copy of a seq whose source row is already gone (``trimmed_after_delivery``):
   kept as ``delivered_unverified``, since nothing is left to check it against.

Ties (several matching copies) resolve to the smallest hash, so reruns write the same rows.
The ``date`` partition is the UTC day of ``ts``.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.common import statuses as st
from spark_jobs.warehouse.schemas import (
    AUDIT_LOG,
    DELIVERIES,
    DETAIL,
    SOURCE_RECORDS,
    columns,
    conform,
)
from watch_service.protocol import hashes
from watch_service.protocol.landing import KIND_RECORD

_RANK_EXISTING = 2
_RANK_UNVERIFIED = 3


def repair_keys(detail: DataFrame) -> DataFrame:
    """Distinct (topic, seq) that some consumer lacks or got wrong and PostgreSQL held when
    reconcile judged it (a source hash; ranges of trimmed seqs have none)."""
    return (
        conform(detail, DETAIL)
        .filter(F.col("status").isin(*st.REPAIRABLE) & F.col("source_hash").isNotNull())
        .select("topic", "seq")
        .distinct()
    )


def seq_ranges(keys: Iterable[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """Contiguous runs of (topic, seq) keys as (topic, first, last): a short filter to push
    down into the JDBC read instead of one predicate per seq."""
    runs: list[tuple[str, int, int]] = []
    for topic, seq in sorted(set(keys)):
        if runs and runs[-1][0] == topic and runs[-1][2] == seq - 1:
            runs[-1] = (topic, runs[-1][1], seq)
        else:
            runs.append((topic, seq, seq))
    return runs


def ranges_filter(ranges: list[tuple[str, int, int]]) -> Column:
    """``(topic = t AND seq BETWEEN a AND b) OR …``; false for no ranges."""
    cond = F.lit(False)
    for topic, lo, hi in ranges:
        cond = cond | ((F.col("topic") == F.lit(topic)) & F.col("seq").between(lo, hi))
    return cond


def _audit_rows(df: DataFrame, origin: Column, rank: Column) -> DataFrame:
    return df.select(
        *list(columns(SOURCE_RECORDS)),
        F.col("data_sha256"),
        origin.alias("origin"),
        rank.alias("rank"),
    )


def delivered_rows(deliveries: DataFrame, detail: DataFrame) -> DataFrame:
    """Delivered copies worth keeping: matching the source, or of already-trimmed seqs."""
    records = conform(deliveries, DELIVERIES).filter(
        (F.col("kind") == F.lit(KIND_RECORD)) & F.col("data").isNotNull()
    )
    judged = (
        conform(detail, DETAIL)
        .filter(F.col("status").isin(st.DELIVERED, st.TRIMMED_AFTER_DELIVERY))
        .select("consumer", "topic", "seq", "status", "source_hash")
    )
    hashed = records.withColumn("data_sha256", F.expr(hashes.spark_payload_hash("data")))
    kept = hashed.join(judged, on=["consumer", "topic", "seq"], how="inner").filter(
        (F.col("status") == st.TRIMMED_AFTER_DELIVERY)
        | (F.col("data_sha256") == F.col("source_hash"))
    )
    verified = F.col("status") == st.DELIVERED
    return _audit_rows(
        kept,
        F.when(verified, st.ORIGIN_DELIVERED).otherwise(st.ORIGIN_UNVERIFIED),
        F.when(verified, 0).otherwise(_RANK_UNVERIFIED),
    )


def source_rows(records: DataFrame, keys: DataFrame) -> DataFrame:
    """Source copies of the repair keys (records already narrowed by the caller's read)."""
    wanted = conform(records, SOURCE_RECORDS).join(
        keys.select("topic", "seq"), on=["topic", "seq"], how="left_semi"
    )
    return _audit_rows(
        wanted.withColumn("data_sha256", F.expr(hashes.spark_payload_hash("data"))),
        F.lit(st.ORIGIN_BACKFILL),
        F.lit(1),
    )


def merge_audit_log(fresh: DataFrame, existing: DataFrame | None) -> DataFrame:
    """One row per topic+seq from fresh rows (with ``rank``) and the previous audit log."""
    rows = fresh
    if existing is not None:
        old = conform(existing, AUDIT_LOG)
        old_rank = F.when(F.col("origin") == st.ORIGIN_UNVERIFIED, _RANK_UNVERIFIED).otherwise(
            _RANK_EXISTING
        )
        rows = rows.unionByName(_audit_rows(old, F.col("origin"), old_rank))
    payload = [
        c for c in columns(SOURCE_RECORDS) + ["data_sha256", "origin"] if c not in ("topic", "seq")
    ]
    best = rows.groupBy("topic", "seq").agg(
        F.min(
            F.struct(F.col("rank"), F.col("data_sha256").alias("h"), *[F.col(c) for c in payload])
        ).alias("best")
    )
    flat = best.select("topic", "seq", *[F.col("best").getField(c).alias(c) for c in payload])
    return conform(flat.withColumn("date", F.to_date(F.timestamp_millis("ts"))), AUDIT_LOG)


def search_records(source: DataFrame) -> DataFrame:
    """The repaired records as the search index takes them: (topic, seq, ts, tag, data)."""
    return source.select("topic", "seq", "ts", "tag", "data")
