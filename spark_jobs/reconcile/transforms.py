"""reconcile: every seq in a consumer's scope gets exactly one status.

Inputs: deliveries (compact's output), source ``records`` and ``gaps`` (PostgreSQL). Scope and
signalled ranges are defined in ``scope.py``: per (consumer, topic), seqs in
``(start_seq, watermark]``. The expected seqs of a consumer are the source records of the topic
in scope plus the seqs of ``gaps`` rows (retention, deletion) in scope; records and gaps never
overlap (seqs are never reused). Rules, first match wins:

==========================  ===============================================================
``delivered``               a source record delivered at least once with a matching hash
                            (``copies`` counts all copies; the summary's ``duplicate`` row
                            adds up ``copies - 1``)
``mismatch`` (defect)       a source record delivered, but no copy's hash matches
``filtered``                a source record not delivered whose ``node`` is the consumer's
                            ``filter_node`` (the service never sends a node its own records)
``trimmed_after_delivery``  a gap seq (source row gone) that was delivered
``phantom`` (defect)        delivered, but neither a source record nor a gap seq
``tombstoned``              not delivered, inside a range the consumer was signalled
                            (tombstone, topic-deleted)
``unverifiable``            a gap seq neither delivered nor signalled, for a consumer with a
                            node filter: it may have been filtered before it was trimmed
``silent_gap`` (defect)     anything else: due, never delivered, never signalled
==========================  ===============================================================

Hashes: a source record's is ``sha2(data_text, 256)``; a delivered copy's is the landed
``data_sha256`` (the sink hashes exactly the text it lands, after any corruption; recomputed
from ``data`` when absent). A copy with no payload at all (``include_data: false``) cannot
be compared and counts as matching. In the detail, ``delivered_hash`` is set only where it
says something ``source_hash`` does not: a mismatch's (largest) copy hash, and the copy hash
of a seq with no source row (phantom, trimmed_after_delivery).
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (BinaryType, BooleanType, IntegerType, LongType, StructField,
                               StructType)

from watch_service.protocol.landing import KIND_RECORD

from spark_jobs.common import statuses as st
from spark_jobs.common.schemas import DELIVERIES, DETAIL, GAPS, SOURCE_RECORDS, SUMMARY, conform
from spark_jobs.reconcile.scope import SCOPE, SIGNALLED, consumer_scope, signalled_ranges

KEY = ["scope_id", "seq"]
_ID, _SEQ = StructField("scope_id", IntegerType(), False), StructField("seq", LongType(), False)

# Hashes travel as 32 raw bytes (unhex of the hex digest) and become hex again at the end.
EXPECTED = StructType([_ID, _SEQ, StructField("source_hash", BinaryType(), True),
                       StructField("in_gap", BooleanType(), False),
                       StructField("own_node", BooleanType(), True),
                       StructField("filters", BooleanType(), False)])
COPIES = StructType([_ID, _SEQ, StructField("hash", BinaryType(), True)])
JUDGED = StructType([_ID, _SEQ, StructField("source_hash", BinaryType(), True),
                     StructField("in_gap", BooleanType(), True),
                     StructField("own_node", BooleanType(), True),
                     StructField("filters", BooleanType(), True),
                     StructField("copies", LongType(), False),
                     StructField("matching", LongType(), False),
                     StructField("some_hash", BinaryType(), True)])


def _in_scope(df: DataFrame, scope: DataFrame, on: list[str]) -> DataFrame:
    joined = df.join(F.broadcast(conform(scope, SCOPE)), on=on, how="inner")
    return joined.filter((F.col("seq") > F.col("start_seq")) & (F.col("seq") <= F.col("watermark")))


def expected_seqs(records: DataFrame, gaps: DataFrame, scope: DataFrame) -> DataFrame:
    """Source records and gap seqs, once per consumer that has them in scope."""
    src = conform(records, SOURCE_RECORDS).select(
        "topic", "seq", "node", F.unhex(F.sha2("data", 256)).alias("source_hash"))
    from_records = _in_scope(src, scope, ["topic"]).select(
        "scope_id", "seq", "source_hash", F.lit(False).alias("in_gap"),
        (F.col("node") == F.col("filter_node")).alias("own_node"),
        F.col("filter_node").isNotNull().alias("filters"))
    clipped = conform(gaps, GAPS).join(F.broadcast(conform(scope, SCOPE)), on="topic",
                                       how="inner").select(
        "scope_id", F.col("filter_node").isNotNull().alias("filters"),
        F.greatest("gap_from", F.col("start_seq") + 1).alias("lo"),
        F.least("gap_to", "watermark").alias("hi"))
    from_gaps = clipped.filter(F.col("lo") <= F.col("hi")).select(
        "scope_id", F.explode(F.sequence("lo", "hi")).alias("seq"),
        F.lit(None).cast("binary").alias("source_hash"), F.lit(True).alias("in_gap"),
        F.lit(None).cast("boolean").alias("own_node"), "filters")
    return conform(conform(from_records, EXPECTED).unionByName(conform(from_gaps, EXPECTED)),
                   EXPECTED)


def delivered_copies(deliveries: DataFrame, scope: DataFrame) -> DataFrame:
    """Delivered record copies in scope, one row per copy, with the landed payload hash
    (recomputed from ``data`` where the sink wrote none)."""
    d = conform(deliveries, DELIVERIES).filter(F.col("kind") == F.lit(KIND_RECORD))
    hashed = d.select("consumer", "topic", "seq", F.unhex(
        F.coalesce(F.col("data_sha256"), F.sha2("data", 256))).alias("hash"))
    return conform(_in_scope(hashed, scope, ["consumer", "topic"]), COPIES)


def judge(expected: DataFrame, copies: DataFrame) -> DataFrame:
    """One row per expected or delivered (scope_id, seq): what was expected, how many copies
    came, how many of them match the source hash.

    Expected rows and copies are unioned and shuffled once; a window over each seq hands the
    source hash to its copies, and the aggregation then runs on the window's partitioning and
    order (no second shuffle or sort).
    """
    e = conform(expected, EXPECTED).select(
        *KEY, "source_hash", "in_gap", "own_node", "filters",
        F.lit(None).cast("binary").alias("hash"), F.lit(False).alias("is_copy"))
    c = conform(copies, COPIES).select(
        *KEY, F.lit(None).cast("binary").alias("source_hash"),
        *[F.lit(None).cast("boolean").alias(x) for x in ("in_gap", "own_node", "filters")],
        "hash", F.lit(True).alias("is_copy"))
    rows = e.unionByName(c).withColumn("expected_hash",
                                       F.max("source_hash").over(Window.partitionBy(*KEY)))
    matches = F.col("is_copy") & (F.col("hash").isNull()
                                  | (F.col("hash") == F.col("expected_hash")))
    judged = rows.groupBy(*KEY).agg(
        *[F.max(x).alias(x) for x in ("source_hash", "in_gap", "own_node", "filters")],
        F.count_if("is_copy").alias("copies"), F.count_if(matches).alias("matching"),
        F.max("hash").alias("some_hash"))
    return conform(judged, JUDGED)


def classify(judged: DataFrame, signalled: DataFrame, scope: DataFrame) -> DataFrame:
    """The status of every judged (scope_id, seq), named by consumer and topic again."""
    names = F.broadcast(conform(scope, SCOPE).select("scope_id", "consumer", "topic"))
    ranges = conform(signalled, SIGNALLED).join(names, on=["consumer", "topic"], how="inner")
    r = F.broadcast(ranges.select("scope_id", "range_from", "range_to")).alias("r")
    j = conform(judged, JUDGED).alias("j")
    covers = ((F.col("j.scope_id") == F.col("r.scope_id")) & (F.col("j.copies") == 0)
              & F.col("j.seq").between(F.col("r.range_from"), F.col("r.range_to")))
    marked = j.join(r, on=covers, how="left").select(
        "j.*", F.col("r.range_from").isNotNull().alias("signalled"))
    in_source = F.col("source_hash").isNotNull()
    in_gap = F.coalesce(F.col("in_gap"), F.lit(False))
    delivered = F.col("copies") > 0
    status = (F.when(in_source & delivered & (F.col("matching") > 0), st.DELIVERED)
              .when(in_source & delivered, st.MISMATCH)
              .when(in_source & F.coalesce(F.col("own_node"), F.lit(False)), st.FILTERED)
              .when(in_gap & delivered, st.TRIMMED_AFTER_DELIVERY)
              .when(~in_source & ~in_gap, st.PHANTOM)
              .when(F.col("signalled"), st.TOMBSTONED)
              .when(in_gap & F.col("filters"), st.UNVERIFIABLE)
              .otherwise(st.SILENT_GAP))
    differs = delivered & ~(in_source & (F.col("matching") > 0))
    out = marked.join(names, on="scope_id", how="inner").select(
        "consumer", "topic", "seq", status.alias("status"),
        F.lower(F.hex("source_hash")).alias("source_hash"),
        F.when(differs, F.lower(F.hex("some_hash"))).alias("delivered_hash"), "copies")
    return conform(out, DETAIL)


def reconcile(deliveries: DataFrame, records: DataFrame, gaps: DataFrame,
              scope: DataFrame | None = None, signalled: DataFrame | None = None) -> DataFrame:
    """The detail table: (consumer, topic, seq, status, source_hash, delivered_hash, copies).

    ``scope`` and ``signalled`` default to ``consumer_scope`` / ``signalled_ranges`` of the
    deliveries; a caller that materialises them first (they are small) spares recomputing
    them for each of their uses.
    """
    scope = consumer_scope(deliveries) if scope is None else scope
    signalled = signalled_ranges(deliveries) if signalled is None else signalled
    judged = judge(expected_seqs(records, gaps, scope), delivered_copies(deliveries, scope))
    return classify(judged, signalled, scope)


def summarize(detail: DataFrame, run_id: str) -> DataFrame:
    """One row per (consumer, topic, status) with its count, plus the ``duplicate`` rows."""
    d = conform(detail, DETAIL)
    counts = d.groupBy("consumer", "topic", "status").agg(F.count(F.lit(1)).alias("count"))
    extra = (d.filter((F.col("status") == st.DELIVERED) & (F.col("copies") > 1))
             .groupBy("consumer", "topic")
             .agg(F.sum(F.col("copies") - 1).alias("count"))
             .withColumn("status", F.lit(st.DUPLICATE)))
    rows = counts.unionByName(extra).withColumn("run_id", F.lit(run_id))
    return conform(rows, SUMMARY)
