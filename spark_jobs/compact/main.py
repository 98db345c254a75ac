"""compact's entry point.

    spark-submit spark_jobs/compact/main.py --landing DIR --out DIR
        [--run-id ID --database-url URL]

Reads every ``<landing>/<consumer>/part-*.parquet`` segment and overwrites ``--out`` with the
deliveries table (Parquet, partitioned by consumer). With ``--run-id`` and
``--database-url`` the step's figures are recorded in ``pipeline_runs``.
"""
from __future__ import annotations

import sys

from pyspark.sql import functions as F

from spark_jobs.common import progress, results, storage
from spark_jobs.common.cli import job_parser
from spark_jobs.common.schemas import DELIVERIES, LANDING
from spark_jobs.common.session import build_session
from spark_jobs.compact.transforms import compact

SEGMENTS = "{landing}/*/part-*.parquet"


def build_parser():
    parser = job_parser("compact", "Landing-zone segments -> the deliveries table.")
    parser.add_argument("--landing", required=True, help="the sink's landing directory")
    parser.add_argument("--out", required=True, help="the deliveries table (overwritten)")
    parser.add_argument("--run-id", default=None)
    parser.add_argument("--database-url", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    timer = progress.Timer()
    spark = build_session("auditsync-compact", args.master)
    pattern = SEGMENTS.format(landing=args.landing.rstrip("/"))
    if storage.matches(spark, pattern):
        landing = spark.read.schema(LANDING).parquet(pattern)
    else:
        landing = spark.createDataFrame([], LANDING)
    compact(landing).write.mode("overwrite").partitionBy("consumer").parquet(args.out)
    written = spark.read.schema(DELIVERIES).parquet(args.out)
    stats = written.agg(F.count(F.lit(1)).alias("rows"),
                        F.countDistinct("consumer").alias("consumers"),
                        F.count_if(F.col("kind") == "record").alias("records")).first()
    counts = {"rows": stats["rows"], "consumers": stats["consumers"], "records": stats["records"]}
    if args.run_id and args.database_url:
        results.record_step(args.database_url, args.run_id, "compact",
                            {"seconds": timer.seconds, **counts})
    progress.emit("compact", timer.seconds, counts)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
