"""backfill's entry point.

    spark-submit spark_jobs/backfill/main.py --deliveries DIR --detail DIR --audit-log DIR
        --database-url URL --run-id ID [--target {audit_log,search_index,both}]
        [--num-partitions N] [--max-pushdown-ranges N]

Re-reads the ``silent_gap`` and ``mismatch`` records of reconcile's detail from PostgreSQL,
rebuilds the audit log (Parquet, one row per topic+seq, partitioned by topic and date) from
them, the verified deliveries and the previous audit log, swaps it in, and upserts the
repaired records into the search index. ``--target`` does one of the two only (Airflow can
run them as parallel tasks); the step is then recorded as ``backfill_<target>``. Rerunning it
writes the same audit log and index.
"""
from __future__ import annotations

import sys

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.backfill.search import upsert_documents
from spark_jobs.backfill.transforms import (delivered_rows, merge_audit_log, ranges_filter,
                                            repair_keys, search_records, seq_ranges,
                                            source_rows)
from spark_jobs.common import jdbc, progress, results, storage
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.schemas import AUDIT_LOG, DELIVERIES, DETAIL
from spark_jobs.common.session import build_session

BOTH = "both"
TARGETS = ("audit_log", "search_index", BOTH)


def build_parser():
    parser = job_parser("backfill", "Repair the audit log and the search index.")
    parser.add_argument("--deliveries", required=True, help="compact's output")
    parser.add_argument("--detail", required=True, help="reconcile's <out>/detail")
    parser.add_argument("--audit-log", required=True, help="the audit log (replaced)")
    parser.add_argument("--target", choices=TARGETS, default=BOTH,
                        help="what to repair (default both); Airflow may run the two apart")
    parser.add_argument("--max-pushdown-ranges", type=int, default=1000,
                        help="above this many seq runs, read records whole and join")
    add_database(parser, partitions=True)
    return parser


def write_audit_log(spark: SparkSession, args, detail: DataFrame, repaired: DataFrame) -> int:
    """Rebuild the audit log beside itself and swap it in; returns its row count."""
    deliveries = spark.read.schema(DELIVERIES).parquet(args.deliveries)
    audit_log = args.audit_log.rstrip("/")
    previous = storage.current(spark, audit_log)
    existing = spark.read.schema(AUDIT_LOG).parquet(previous) if previous else None
    merged = merge_audit_log(delivered_rows(deliveries, detail).unionByName(repaired), existing)
    staged = f"{audit_log}.staged"
    merged.write.mode("overwrite").partitionBy("topic", "date").parquet(staged)
    storage.swap_in(spark, staged, audit_log)
    return spark.read.schema(AUDIT_LOG).parquet(audit_log).count()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    timer = progress.Timer()
    spark = build_session("auditsync-backfill", args.master)
    detail = spark.read.schema(DETAIL).parquet(args.detail)
    keys = repair_keys(detail).cache()
    wanted = [(r["topic"], r["seq"]) for r in keys.collect()]
    ranges = seq_ranges(wanted)
    records = jdbc.read_records(spark, jdbc.jdbc_target(args.database_url), args.num_partitions)
    if len(ranges) <= args.max_pushdown_ranges:
        records = records.filter(ranges_filter(ranges))
    repaired = source_rows(records, keys).cache()
    counts: dict[str, object] = {"repair_keys": len(wanted)}
    if args.target in (BOTH, "audit_log"):
        counts["audit_rows"] = write_audit_log(spark, args, detail, repaired)
    if args.target in (BOTH, "search_index"):
        docs = [tuple(r) for r in search_records(repaired).collect()]
        indexed, refused = upsert_documents(args.database_url, docs)
        counts.update(backfilled=len(docs), indexed=indexed, index_refused=refused)
    step = "backfill" if args.target == BOTH else f"backfill_{args.target}"
    results.record_step(args.database_url, args.run_id, step, {"seconds": timer.seconds, **counts})
    progress.emit(step, timer.seconds, counts)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
