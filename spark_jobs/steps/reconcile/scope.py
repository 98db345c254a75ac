"""Per consumer and topic: which seqs are due (the scope), and which ranges the consumer was
told it will never get (signalled loss). Both come from the deliveries alone and are small:
one row per consumer and topic (scope), one per merged range (signalled).

Scope of (consumer, topic) is ``start_seq < seq <= watermark``:

- ``watermark`` = the highest cursor the consumer reached for the topic: max over its items of
  ``cursor`` (the topic's cursor in the frame id), falling back to the item's own position when
  ``cursor`` is null (a record's seq, a tombstone's gap_to, a caught-up's head_seq); a
  ``topic-deleted`` item reaches its ``head_seq``. Seqs above it are not yet due.
- ``start_seq`` = the topic's cursor just before the consumer's first frame for the topic: its
  ``cursor_before`` (the topic's entry in the previous frame id, which holds the session's
  starting cursor for every watched topic; for the consumer's very first frame, the session
  start its first landing segment's footer names), else what the first frame itself shows: a
  record frame ``min(seq) - 1``, a tombstone ``gap_from - 1``, caught-up / topic-deleted
  ``cursor``. Seqs at or below it were never owed: the consumer subscribed after them
  (``from_seq``, ``tail``). A consumer that started at 0 has ``start_seq = 0`` and everything
  is in scope. (The fallback is only for landings without that footer key, older sinks' or
  hand-written: there a record lost or node-filtered at the very start of the consumer's
  first frame falls at or below ``min(seq) - 1``, out of scope.)
- ``filter_node`` = the consumer's node filter (the one on most of its items, if it changed).
- ``scope_id`` = a small number for the (consumer, topic), the key of reconcile's shuffles.

Incrementally, ``progress`` (PostgreSQL ``reconcile_windows``) holds per (consumer, topic) the
``start_seq`` and the ``reconciled_through`` of earlier runs: the run's window is
``lo < seq <= watermark`` with ``lo = reconciled_through`` (else ``start_seq``) and the
watermark never below ``lo``. The deliveries are then only the batches not yet reconciled.

Signalled ranges: a delivered ``tombstone`` signals ``[gap_from, gap_to]``; a delivered
``topic-deleted`` signals ``[gap_from, head_seq]``, everything after the cursor the consumer had
up to the head at deletion. The sink writes that ``gap_from`` from its own cursor, which frames
it received but lost still moved; for a landing without it, ``cursor_before + 1`` (the previous
landed frame's cursor), and nothing when that is unknown too. Overlapping and
adjacent ranges are merged, so each seq falls in at most one range. A ``rewound`` frame is no
signalled loss: it says the source lost ``[gap_from, gap_to]`` and that the stream sends what
the source writes for those seqs again, so a seq of it the source holds now and the consumer
lacks is still owed (a ``silent_gap``). Its range is evidence of a rewind (``rewound_frames``,
``evidence.find``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from spark_jobs.warehouse.schemas import DELIVERIES, conform
from watch_service.protocol.landing import (
    KIND_CAUGHT_UP,
    KIND_RECORD,
    KIND_REWOUND,
    KIND_TOMBSTONE,
    KIND_TOPIC_DELETED,
)

SCOPE = StructType(
    [
        StructField("scope_id", IntegerType(), False),
        StructField("consumer", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("start_seq", LongType(), True),
        StructField("lo", LongType(), True),
        StructField("watermark", LongType(), True),
        StructField("filter_node", StringType(), True),
    ]
)
PROGRESS = StructType(
    [
        StructField("consumer", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("start_seq", LongType(), False),
        StructField("reconciled_through", LongType(), False),
        StructField("filter_node", StringType(), True),
    ]
)
SIGNALLED = StructType(
    [
        StructField("consumer", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("range_from", LongType(), False),
        StructField("range_to", LongType(), False),
    ]
)


def _kind(name: str) -> Column:
    return F.col("kind") == F.lit(name)


def consumer_scope(deliveries: DataFrame, progress: DataFrame | None = None) -> DataFrame:
    """One row per (consumer, topic) delivered to: ``start_seq``, ``lo``, ``watermark``,
    ``filter_node``, continuing ``progress`` where it has the pair."""
    d = conform(deliveries, DELIVERIES)
    first_view = (
        F.when(_kind(KIND_RECORD), F.col("seq") - 1)
        .when(_kind(KIND_TOMBSTONE), F.col("gap_from") - 1)
        .otherwise(F.col("cursor"))
    )
    start = F.coalesce(F.col("cursor_before"), first_view)
    own_position = (
        F.when(_kind(KIND_RECORD), F.col("seq"))
        .when(_kind(KIND_TOMBSTONE), F.col("gap_to"))
        .when(_kind(KIND_CAUGHT_UP), F.col("head_seq"))
    )
    reach = F.when(_kind(KIND_TOPIC_DELETED), F.greatest("cursor", "head_seq")).otherwise(
        F.coalesce(F.col("cursor"), own_position)
    )
    # Per frame first (hash aggregation on longs), then per topic: the first frame's start.
    per_frame = d.groupBy("consumer", "topic", "frame_no").agg(
        F.min(start).alias("start"), F.max(reach).alias("reach")
    )
    per_topic = per_frame.groupBy("consumer", "topic").agg(
        F.min_by("start", "frame_no").alias("start_seq"), F.max("reach").alias("watermark")
    )
    # Count first so the string column is only ever a grouping key (hash aggregation).
    nodes = (
        d.filter(F.col("filter_node").isNotNull())
        .groupBy("consumer", "filter_node")
        .agg(F.count(F.lit(1)).alias("items"))
        .groupBy("consumer")
        .agg(F.max_by("filter_node", "items").alias("filter_node"))
    )
    # A small dense id per (consumer, topic) keys the big shuffle instead of two strings; the
    # table is tiny, so numbering it in one partition is free.
    scope_id = F.row_number().over(Window.partitionBy(F.lit(0)).orderBy("consumer", "topic"))
    scope = per_topic.join(nodes, on="consumer", how="left")
    if progress is None:
        scope = scope.withColumn("lo", F.col("start_seq"))
    else:
        p = conform(progress, PROGRESS).withColumnRenamed("filter_node", "prior_node")
        known = F.col("reconciled_through").isNotNull()
        scope = scope.join(
            F.broadcast(p).withColumnRenamed("start_seq", "prior_start"),
            on=["consumer", "topic"],
            how="left",
        ).select(
            "consumer",
            "topic",
            F.when(known, F.col("prior_start")).otherwise(F.col("start_seq")).alias("start_seq"),
            F.when(known, F.col("reconciled_through")).otherwise(F.col("start_seq")).alias("lo"),
            F.when(known, F.greatest("watermark", "reconciled_through"))
            .otherwise(F.col("watermark"))
            .alias("watermark"),
            F.coalesce("filter_node", "prior_node").alias("filter_node"),
        )
    return conform(scope.withColumn("scope_id", scope_id), SCOPE)


def signalled_ranges(deliveries: DataFrame) -> DataFrame:
    """Merged ``[range_from, range_to]`` per (consumer, topic) the consumer was told it will
    never get (tombstones, topic deletions)."""
    d = conform(deliveries, DELIVERIES)
    tombstones = d.filter(_kind(KIND_TOMBSTONE)).select(
        "consumer",
        "topic",
        F.col("gap_from").alias("range_from"),
        F.col("gap_to").alias("range_to"),
    )
    # The sink writes the range a deletion signals (gap_from: after its cursor before the
    # frame); older landings did not, and the previous landed frame's cursor stands in.
    deleted = d.filter(_kind(KIND_TOPIC_DELETED)).select(
        "consumer",
        "topic",
        F.coalesce(F.col("gap_from"), F.col("cursor_before") + 1).alias("range_from"),
        F.col("head_seq").alias("range_to"),
    )
    ranges = (
        tombstones.unionByName(deleted)
        .filter(
            F.col("range_from").isNotNull()
            & F.col("range_to").isNotNull()
            & (F.col("range_from") <= F.col("range_to"))
        )
        .distinct()
    )
    return conform(merge_ranges(ranges), SIGNALLED)


def rewound_frames(deliveries: DataFrame) -> DataFrame:
    """``[range_from, range_to]`` of every landed ``rewound`` frame, per (consumer, topic): the
    seqs the service told the consumer the source no longer has (``SIGNALLED`` columns)."""
    d = conform(deliveries, DELIVERIES)
    frames = d.filter(_kind(KIND_REWOUND) & (F.col("gap_from") <= F.col("gap_to"))).select(
        "consumer",
        "topic",
        F.col("gap_from").alias("range_from"),
        F.col("gap_to").alias("range_to"),
    )
    return conform(frames.distinct(), SIGNALLED)


def merge_ranges(ranges: DataFrame) -> DataFrame:
    """Union of inclusive ranges per (consumer, topic): overlapping or adjacent ones merge."""
    order = Window.partitionBy("consumer", "topic").orderBy("range_from", "range_to")
    reached = F.max("range_to").over(order.rowsBetween(Window.unboundedPreceding, -1))
    starts_group = F.when(reached.isNull() | (F.col("range_from") > reached + 1), 1).otherwise(0)
    grouped = ranges.withColumn("starts", starts_group).withColumn(
        "group",
        F.sum("starts").over(order.rowsBetween(Window.unboundedPreceding, Window.currentRow)),
    )
    return grouped.groupBy("consumer", "topic", "group").agg(
        F.min("range_from").alias("range_from"), F.max("range_to").alias("range_to")
    )
