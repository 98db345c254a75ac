"""reconcile's entry point.

    spark-submit spark_jobs/reconcile/main.py --deliveries DIR --out DIR
        --database-url URL --run-id ID [--num-partitions N]

Reads the deliveries table and, over JDBC partitioned by seq, the source ``records`` of the
delivered topics and the ``gaps``. Writes ``<out>/detail`` (one row per consumer, topic and
seq with its status) and ``<out>/summary`` as Parquet, overwriting both, and replaces the
run's rows in PostgreSQL ``reconcile_summary``.
"""
from __future__ import annotations

import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import jdbc, progress, results
from spark_jobs.common import statuses as st
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.schemas import DELIVERIES, DETAIL, SUMMARY
from spark_jobs.common.session import build_session
from spark_jobs.reconcile.scope import SCOPE, SIGNALLED, consumer_scope, signalled_ranges
from spark_jobs.reconcile.transforms import reconcile, summarize


def build_parser():
    parser = job_parser("reconcile", "Source records and gaps against deliveries.")
    parser.add_argument("--deliveries", required=True, help="compact's output")
    parser.add_argument("--out", required=True, help="writes <out>/detail and <out>/summary")
    add_database(parser, partitions=True)
    return parser


def held_locally(spark: SparkSession, deliveries: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Scope and signalled ranges, computed once and held on the driver: they are small (one
    row per consumer and topic, one per range) and reconcile uses each several times."""
    scope = spark.createDataFrame(consumer_scope(deliveries).collect(), SCOPE)
    return scope, spark.createDataFrame(signalled_ranges(deliveries).collect(), SIGNALLED)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    timer = progress.Timer()
    spark = build_session("auditsync-reconcile", args.master)
    target = jdbc.jdbc_target(args.database_url)
    deliveries = spark.read.schema(DELIVERIES).parquet(args.deliveries)
    scope, signalled = held_locally(spark, deliveries)
    topics = sorted({r["topic"] for r in scope.collect()})
    records = jdbc.read_records(spark, target, args.num_partitions).filter(
        F.col("topic").isin(topics))
    gaps = jdbc.read_gaps(spark, target).filter(F.col("topic").isin(topics))
    out = args.out.rstrip("/")
    detail = reconcile(deliveries, records, gaps, scope, signalled)
    detail.write.mode("overwrite").parquet(f"{out}/detail")
    detail = spark.read.schema(DETAIL).parquet(f"{out}/detail")
    summarize(detail, args.run_id).write.mode("overwrite").parquet(f"{out}/summary")
    summary = spark.read.schema(SUMMARY).parquet(f"{out}/summary").collect()
    results.replace_summary(args.database_url, args.run_id, summary)
    totals: dict[str, int] = {}
    for row in summary:
        totals[row["status"]] = totals.get(row["status"], 0) + row["count"]
    counts = {"seqs": sum(v for k, v in totals.items() if k != st.DUPLICATE),
              "defects": sum(totals.get(k, 0) for k in st.DEFECTS), **totals}
    results.record_step(args.database_url, args.run_id, "reconcile",
                        {"seconds": timer.seconds, **counts})
    progress.emit("reconcile", timer.seconds, counts)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
