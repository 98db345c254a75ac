"""maintenance's entry point: small files rewritten, old snapshots expired, orphans removed.

    spark-submit spark_jobs/steps/maintenance/main.py --work LOCATION [--run-id ID]
        [--snapshot-retention-hours 168] [--target-file-size-mb 128] [--table NAME ...]

Per warehouse table (``spark_jobs.warehouse.layout.TABLES``) that has a snapshot: Iceberg's
``rewrite_data_files``, ``expire_snapshots`` and ``remove_orphan_files`` procedures, with the
limits ``spark_jobs.warehouse.maintenance`` decides: no snapshot a pipeline run started within the
retention references is expired (``pipeline_runs.snapshots``), nor the one holding compact's
state. One progress line per table; the figures (data files before/after, snapshots expired,
orphans removed, per table and in total) are the step's result (an XCom under Airflow).
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable

from pyspark.sql import SparkSession

from spark_jobs.common import errors, progress, store
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.session import build_session
from spark_jobs.warehouse import maintenance as plan
from spark_jobs.warehouse.layout import TABLES, Layout
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs


def build_parser():
    parser = job_parser("maintenance", "Rewrite small files, expire snapshots, remove orphans.")
    parser.add_argument("--work", required=True, help="the warehouse: a path, file:// or s3://")
    parser.add_argument(
        "--snapshot-retention-hours",
        type=float,
        default=plan.DEFAULT_RETENTION_HOURS,
        help=f"keep snapshots (and orphan files) this recent (default "
        f"{plan.DEFAULT_RETENTION_HOURS}: 7 days)",
    )
    parser.add_argument(
        "--target-file-size-mb",
        type=int,
        default=plan.DEFAULT_TARGET_FILE_MB,
        help=f"size of the rewritten data files (default {plan.DEFAULT_TARGET_FILE_MB})",
    )
    parser.add_argument(
        "--table",
        action="append",
        choices=TABLES,
        default=None,
        help="only this table (repeatable; default: every warehouse table)",
    )
    add_database(parser, required=False)
    return parser


def run(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None = None,
    warehouse: Warehouse | None = None,
) -> dict:
    """Maintain every table (or ``--table``s) that has a snapshot; returns the figures."""
    url = store.pipeline_url(args)
    if not url:
        raise errors.WarehouseError(
            "maintenance needs the catalog's database: --pipeline-database-url or "
            "AUDITSYNC_PIPELINE_DATABASE_URL (apart), else --database-url or AUDITSYNC_DATABASE_URL"
        )
    timer = progress.Timer()
    wh = warehouse or Warehouse.attach(spark, Layout("", args.work, args.run_id or ""), url)
    layout = wh.layout
    now = dt.datetime.now(dt.UTC)
    cutoff = plan.cutoff_ms(now, args.snapshot_retention_hours)
    since = now - dt.timedelta(hours=args.snapshot_retention_hours)
    with store.connect(url) as conn:
        referenced = runs.referenced_snapshots(conn, layout.catalog, since)
    per_table: dict[str, dict[str, object]] = {}
    for name in args.table or TABLES:
        if wh.snapshot(name) is None:
            continue  # never written: nothing to rewrite, expire or orphan
        figures = wh.maintain(
            name,
            cutoff,
            referenced.get(name, set()),
            args.target_file_size_mb,
            hook,
        )
        per_table[name] = figures
        progress.say(plan.progress_line(name, figures))
    totals = {
        key: sum(int(f[key]) for f in per_table.values())  # type: ignore[call-overload]
        for key in ("files_before", "files_after", "snapshots_expired", "orphans_removed")
    }
    return {"seconds": timer.seconds, **totals, "tables": per_table}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure()
    spark = build_session("auditsync-maintenance", args.master)
    figures = run(spark, args)
    progress.emit(
        "maintenance", figures["seconds"], {k: v for k, v in figures.items() if k != "tables"}
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
