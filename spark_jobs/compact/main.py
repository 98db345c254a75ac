"""compact's entry point: the landing segments not yet compacted -> one new deliveries batch.

    spark-submit spark_jobs/compact/main.py --landing DIR --work DIR --run-id ID

Lists ``<landing>/<consumer>/part-*.parquet``, takes those after each consumer's last
compacted segment, and appends them as a batch to ``<work>/deliveries`` (partitioned by
consumer and topic), committed with the record of which segments it consumed
(``spark_jobs.common.batches``). Nothing new: no batch. The step's figures go to
``pipeline_runs`` when a database URL is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import batches, progress, store, warehouse
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.schemas import DELIVERIES, LANDING
from spark_jobs.common.session import build_session, stop_session
from spark_jobs.compact.transforms import LAST_FRAMES, compact, last_frames
from spark_jobs.layout import Layout


def build_parser():
    parser = job_parser("compact", "New landing segments -> a deliveries batch.")
    parser.add_argument("--landing", required=True, help="the sink's landing directory")
    parser.add_argument("--work", required=True, help="the warehouse root")
    add_database(parser)
    return parser


def run(spark: SparkSession, args, hook: Callable[[str], None] | None = None) -> dict:
    """Compact what is new; returns the step's figures. ``hook(point)`` is called at the
    commit's crash points (tests kill the step there)."""
    timer = progress.Timer()
    layout = Layout(Path(args.landing), Path(args.work), args.run_id)
    warehouse.prepare(layout)
    batches.recover(layout.deliveries, layout.batches)
    state = batches.latest(layout.batches)
    segments = batches.new_segments(layout.landing, state)
    counts: dict[str, object] = {"batch": None, "segments": 0, "rows": 0, "records": 0}
    if segments:
        landing = spark.read.schema(LANDING).parquet(*[str(s.path) for s in segments])
        previous = spark.createDataFrame(
            [
                (c, v["frame_no"], v.get("frame_id"))
                for c, v in state["consumers"].items()
                if "frame_no" in v
            ],
            LAST_FRAMES,
        )
        staging = layout.deliveries / "_staging" / f"b{state['batch'] + 1:08d}"
        (
            compact(landing, previous)
            .write.mode("overwrite")
            .partitionBy("consumer", "topic")
            .parquet(str(staging))
        )
        staged = warehouse.read_table(spark, staging, DELIVERIES)
        stats = staged.agg(
            F.count(F.lit(1)).alias("rows"), F.count_if(F.col("kind") == "record").alias("records")
        ).first()
        lasts = {
            r["consumer"]: (r["frame_no"], r["frame_id"]) for r in last_frames(staged).collect()
        }
        record = batches.commit(
            layout.deliveries, layout.batches, state, args.run_id, staging, segments, lasts, hook
        )
        counts = {
            "batch": record["batch"],
            "segments": len(segments),
            "rows": stats["rows"],
            "records": stats["records"],
        }
    figures = {"seconds": timer.seconds, **counts}
    store.record_step(args, "compact", figures)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spark = build_session("auditsync-compact", args.master)
    figures = run(spark, args)
    progress.emit("compact", figures["seconds"], figures)
    stop_session(spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
