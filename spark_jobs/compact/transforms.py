"""compact: landing rows -> deliveries, one row per delivered frame item.

The landing zone is append-only and complete, so compact recomputes the whole table from it
and a rerun overwrites the same output. Frame numbers never repeat within a consumer (the
sink's durability protocol guarantees it, and a re-delivery gets a new number), so every
landing row is a distinct delivered item and is kept as it is.

One column is added: ``cursor_before``, the frame's topic cursor in the consumer's *previous*
frame id, i.e. that topic's cursor just before this frame. Reconcile uses it for a
consumer's starting point per topic and for the range a ``topic-deleted`` frame signals.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.common.cursors import topic_cursor
from spark_jobs.common.schemas import DELIVERIES, LANDING, conform


def with_cursor_before(items: DataFrame) -> DataFrame:
    """Add ``cursor_before`` from the consumer's previous frame id (null for its first)."""
    items = conform(items, LANDING)
    # All items of a frame share its id and topic: distinct rows are the frames (few).
    frames = items.select("consumer", "frame_no", "frame_id", "topic").distinct()
    order = Window.partitionBy("consumer").orderBy("frame_no")
    before = frames.select(
        "consumer", "frame_no",
        topic_cursor(F.lag("frame_id").over(order), F.col("topic")).alias("cursor_before"))
    return conform(items.join(before, on=["consumer", "frame_no"], how="left"), DELIVERIES)


def compact(landing: DataFrame) -> DataFrame:
    return landing.transform(with_cursor_before)
