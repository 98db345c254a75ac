"""compact: landing rows -> deliveries, one row per delivered frame item.

Frame numbers never repeat within a consumer (the sink's durability protocol guarantees it,
and a re-delivery gets a new number), so every landing row is a distinct delivered item and
is kept as it is. compact runs over the segments not yet compacted (``spark_jobs.common.
batches``), so each row is compacted exactly once.

One column is added: ``cursor_before``, the frame's topic cursor in the consumer's *previous*
frame id, i.e. that topic's cursor just before this frame. For a batch's first frame of a
consumer the previous frame is the last one of the batch before (``previous``). Reconcile uses
it for a consumer's starting point per topic and for the range a ``topic-deleted`` frame
signals.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_jobs.common.cursors import topic_cursor
from spark_jobs.warehouse.schemas import DELIVERIES, LANDING, conform

# Each consumer's last compacted frame before this batch.
LAST_FRAMES = StructType(
    [
        StructField("consumer", StringType(), False),
        StructField("frame_no", LongType(), False),
        StructField("frame_id", StringType(), True),
    ]
)


def with_cursor_before(items: DataFrame, previous: DataFrame | None = None) -> DataFrame:
    """Add ``cursor_before`` from the consumer's previous frame id (null for its first)."""
    items = conform(items, LANDING)
    # All items of a frame share its id and topic: distinct rows are the frames (few).
    frames = items.select("consumer", "frame_no", "frame_id", "topic").distinct()
    if previous is not None:
        frames = frames.unionByName(
            conform(previous, LAST_FRAMES).withColumn("topic", F.lit(None).cast("string"))
        )
    order = Window.partitionBy("consumer").orderBy("frame_no")
    before = frames.select(
        "consumer",
        "frame_no",
        topic_cursor(F.lag("frame_id").over(order), F.col("topic")).alias("cursor_before"),
    )
    return conform(items.join(before, on=["consumer", "frame_no"], how="left"), DELIVERIES)


def compact(landing: DataFrame, previous: DataFrame | None = None) -> DataFrame:
    return with_cursor_before(landing, previous)


# Per consumer of a batch: its last frame (the next batch's ``previous``) and the batch's rows
# and record items of that consumer.
BATCH_FIGURES = StructType(
    [
        *LAST_FRAMES.fields,
        StructField("rows", LongType(), False),
        StructField("records", LongType(), False),
    ]
)


def batch_figures(deliveries: DataFrame) -> DataFrame:
    """``BATCH_FIGURES`` of ``deliveries``: one aggregate gives compact both its state (the last
    frames) and its counts, so a batch is scanned by one Spark job, not two."""
    return conform(
        conform(deliveries, DELIVERIES)
        .groupBy("consumer")
        .agg(
            F.max("frame_no").alias("frame_no"),
            F.max_by("frame_id", "frame_no").alias("frame_id"),
            F.count(F.lit(1)).alias("rows"),
            F.count_if(F.col("kind") == "record").alias("records"),
        ),
        BATCH_FIGURES,
    )
