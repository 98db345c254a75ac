"""backfill's entry point.

    spark-submit spark_jobs/backfill/main.py --work DIR --run-id ID
        [--target {audit_log,search_index,both}] [--num-partitions N] [--max-pushdown-ranges N]

Re-reads from PostgreSQL (bounded to their seq runs) the ``silent_gap`` and ``mismatch``
records of this run's detail and of earlier runs whose repairs are still open, merges them
and the run's verified deliveries into only the audit-log partitions (topic, date) they
touch (``spark_jobs.common.audit_log``), and upserts the repaired records into the search
index in bounded chunks. ``--target`` does one of the two only (Airflow may run them as
parallel tasks); the step is then recorded as ``backfill_<target>``. Re-running writes the
same rows.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.backfill.search import upsert_documents
from spark_jobs.backfill.transforms import (
    delivered_rows,
    merge_audit_log,
    repair_keys,
    search_records,
    source_rows,
)
from spark_jobs.common import (
    audit_log,
    jdbc,
    partitions,
    progress,
    storage,
    store,
    warehouse,
)
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.schemas import DELIVERIES, DETAIL
from spark_jobs.common.session import build_session, stop_session
from spark_jobs.layout import Layout
from spark_jobs.reconcile.late import seq_runs
from watch_service.store import runs

BOTH = "both"
TARGETS = ("audit_log", "search_index", BOTH)
UPSERT_CHUNK = 5_000


def build_parser():
    parser = job_parser("backfill", "Repair the audit log and the search index.")
    parser.add_argument("--work", required=True, help="the warehouse root")
    parser.add_argument(
        "--target",
        choices=TARGETS,
        default=BOTH,
        help="what to repair (default both); Airflow may run the two apart",
    )
    parser.add_argument(
        "--max-pushdown-ranges",
        type=int,
        default=1000,
        help="above this many seq runs, read each topic's whole span",
    )
    add_database(parser, partitions=True)
    return parser


def run_details(spark: SparkSession, layout: Layout, run_ids: list[str]) -> DataFrame:
    """The detail of these runs (those whose outputs still exist), with a ``run_id``."""
    frames = [
        spark.read.schema(DETAIL)
        .parquet(str(layout.run_path("detail", r)))
        .withColumn("run_id", F.lit(r))
        for r in run_ids
        if storage.data_files(layout.run_path("detail", r))
    ]
    out = spark.createDataFrame([], DETAIL).withColumn("run_id", F.lit(None).cast("string"))
    for frame in frames:
        out = out.unionByName(frame)
    return out


def repair_spans(keys: DataFrame, limit: int) -> list[jdbc.Window]:
    """Seq runs of the repair keys per topic; each topic's whole span beyond ``limit``."""
    spans = [(r["topic"], r["lo"], r["hi"]) for r in seq_runs(keys).limit(limit + 1).collect()]
    if len(spans) <= limit:
        return spans
    return [
        (r["topic"], r["lo"], r["hi"])
        for r in keys.groupBy("topic")
        .agg((F.min("seq") - 1).alias("lo"), F.max("seq").alias("hi"))
        .collect()
    ]


def write_audit_log(
    spark: SparkSession, layout: Layout, fresh: DataFrame, hook: Callable[[str], None] | None = None
) -> list[str]:
    """Merge ``fresh`` into the partitions it touches; returns their folders."""
    audit_log.recover(layout.audit_log)
    dated = fresh.withColumn("date", F.to_date(F.timestamp_millis("ts"))).cache()
    touched = sorted(
        partitions.folder(topic=r["topic"], date=r["date"])
        for r in dated.select("topic", "date").distinct().collect()
    )
    if not touched:
        return []
    existing = audit_log.current(spark, layout.audit_log, touched)
    merged = merge_audit_log(dated.drop("date"), existing)
    return audit_log.replace(spark, layout.audit_log, layout.run_id, merged, touched, hook)


def run(spark: SparkSession, args, hook: Callable[[str], None] | None = None) -> dict:
    """Repair; returns the step's figures. ``hook(point)`` is called between the audit-log
    partition swaps (tests kill the step there)."""
    timer = progress.Timer()
    layout = Layout(Path("."), Path(args.work), args.run_id)
    manifest = storage.read_json(layout.manifest, {})
    with store.connect(args.database_url) as conn:
        carried = runs.open_repairs(conn, warehouse.identity(layout), args.run_id)
    detail = spark.read.schema(DETAIL).parquet(str(layout.run_path("detail")))
    everything = detail.unionByName(run_details(spark, layout, carried).drop("run_id"))
    keys = repair_keys(everything).cache()
    spans = repair_spans(keys, args.max_pushdown_ranges)
    records = jdbc.read_records_in(
        spark, jdbc.jdbc_target(args.database_url), spans, args.num_partitions
    )
    repaired = source_rows(records, keys).cache()
    counts: dict[str, object] = {"repair_keys": keys.count(), "carried_runs": len(carried)}
    if args.target in (BOTH, "audit_log"):
        deliveries = warehouse.read_files(
            spark, layout.deliveries, manifest.get("deliveries", []), DELIVERIES
        )
        written = write_audit_log(
            spark, layout, delivered_rows(deliveries, detail).unionByName(repaired), hook
        )
        storage.write_json(layout.manifest, {**manifest, "audit_partitions": written})
        counts["audit_partitions"] = len(written)
    if args.target in (BOTH, "search_index"):
        indexed = refused = backfilled = 0
        rows = (tuple(r) for r in search_records(repaired).toLocalIterator())
        while chunk := list(itertools.islice(rows, UPSERT_CHUNK)):
            done, bad = upsert_documents(args.database_url, chunk)
            indexed, refused, backfilled = indexed + done, refused + bad, backfilled + len(chunk)
        counts.update(backfilled=backfilled, indexed=indexed, index_refused=refused)
    step = "backfill" if args.target == BOTH else f"backfill_{args.target}"
    figures = {"seconds": timer.seconds, **counts}
    store.record_step(args, step, figures)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spark = build_session("auditsync-backfill", args.master)
    figures = run(spark, args)
    step = "backfill" if args.target == BOTH else f"backfill_{args.target}"
    progress.emit(step, figures["seconds"], figures)
    stop_session(spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
