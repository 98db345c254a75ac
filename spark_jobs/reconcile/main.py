"""reconcile's entry point: judge the window of every (consumer, topic) delivered to.

    spark-submit spark_jobs/reconcile/main.py --work DIR --run-id ID [--num-partitions N]
        [--full]

Reads the delivery batches no earlier run reconciled, continues each (consumer, topic) from its
``reconciled_through`` in PostgreSQL, reads the source ``records`` and ``gaps`` of those
windows only (bounded in the JDBC query), judges late copies of earlier seqs, and writes the
run's partitions of the Iceberg tables ``detail`` and ``summary`` (this run's verdicts only)
and ``ledger``, and then, in ONE PostgreSQL transaction, the run's summary rows, windows and
consumed batches. A crash before that commit leaves nothing an incremental run reads; a re-run
redoes it.

``--full`` is the audit mode: every batch the incremental runs consumed, judged from scratch
into the tables ``audit_detail`` and ``audit_summary``, compared with the net verdicts of all
incremental runs; nothing in PostgreSQL changes. It judges against the source as it is now: a
seq trimmed by retention after its incremental verdict (delivered, filtered) is judged again
without its source row (trimmed_after_delivery, unverifiable) and shows up as a difference, by
design.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import jdbc, progress, store, tables
from spark_jobs.common import statuses as st
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.schemas import DELIVERIES, DETAIL, LEDGER, conform
from spark_jobs.common.session import build_session, stop_session
from spark_jobs.layout import Layout
from spark_jobs.reconcile.late import late_copies, merge_summary, rejudge, seq_runs
from spark_jobs.reconcile.scope import (
    PROGRESS,
    SCOPE,
    SIGNALLED,
    consumer_scope,
    signalled_ranges,
)
from spark_jobs.reconcile.transforms import reconcile, summarize
from watch_service.store import runs


def build_parser():
    parser = job_parser("reconcile", "Judge each (consumer, topic) window against PostgreSQL.")
    parser.add_argument("--work", required=True, help="the warehouse root")
    parser.add_argument(
        "--full",
        action="store_true",
        help="audit mode: re-judge all history, compare, change nothing",
    )
    add_database(parser, partitions=True)
    return parser


def held_locally(
    spark: SparkSession, deliveries: DataFrame, progress_rows: list | None = None
) -> tuple[DataFrame, DataFrame, list]:
    """Scope and signalled ranges, computed once and held on the driver: they are small (one
    row per consumer and topic, one per range) and reconcile uses each several times."""
    prior = None if progress_rows is None else spark.createDataFrame(progress_rows, PROGRESS)
    rows = consumer_scope(deliveries, prior).collect()
    scope = spark.createDataFrame(rows, SCOPE)
    return scope, spark.createDataFrame(signalled_ranges(deliveries).collect(), SIGNALLED), rows


def windows_of(scope_rows: list) -> list[jdbc.Window]:
    """Per topic, the union of its scopes' windows: what PostgreSQL is asked for."""
    out: dict[str, tuple[int, int]] = {}
    for r in scope_rows:
        if r["lo"] is None or r["watermark"] is None or r["watermark"] <= r["lo"]:
            continue
        lo, hi = out.get(r["topic"], (r["lo"], r["watermark"]))
        out[r["topic"]] = (min(lo, r["lo"]), max(hi, r["watermark"]))
    return [(t, lo, hi) for t, (lo, hi) in out.items()]


def _ledger(spark: SparkSession, layout: Layout, committed: set[str]) -> DataFrame:
    """Committed runs' ledger rows (a crashed run's rows, never committed, are ignored)."""
    runs_ = sorted(committed - {layout.run_id})
    return conform(tables.runs_rows(spark, layout, "ledger", runs_), LEDGER)


def _late(
    spark: SparkSession,
    args,
    layout: Layout,
    deliveries: DataFrame,
    scope: DataFrame,
    target: jdbc.JdbcTarget,
    through: int,
    committed: set[str],
):
    late = late_copies(deliveries, scope).cache()
    if late.limit(1).count() == 0:
        return None
    spans = [(r["topic"], r["lo"], r["hi"]) for r in seq_runs(late).collect()]
    records = jdbc.read_records_in(spark, target, spans, 1)
    gaps = jdbc.read_gaps_in(spark, target, spans)
    pairs = late.select("consumer", "topic").distinct()
    ledger = _ledger(spark, layout, committed).join(
        pairs, on=["consumer", "topic"], how="left_semi"
    )
    return rejudge(late, ledger, records, gaps, through)


def run(spark: SparkSession, args, hook: Callable[[str], None] | None = None) -> dict:
    """Judge the windows; returns the step's figures. ``hook(point)`` is called just before
    the PostgreSQL commit (tests kill the step there)."""
    timer = progress.Timer()
    layout = Layout("", args.work, args.run_id)
    tables.attach(spark, layout, args.database_url)
    house = layout.catalog
    with store.connect(args.database_url) as conn:
        last, progress_rows = runs.reconcile_state(conn, house, args.run_id)
        committed = runs.committed_runs(conn, house)
    latest = tables.compact_state(spark, layout)["batch"]
    if latest < last:
        raise tables.WarehouseError(
            f"PostgreSQL says delivery batches up to {last} were reconciled, but {layout.work} "
            f"holds batches up to {latest} only: this is not the warehouse those runs used"
        )
    first, through = (1, last) if args.full else (last + 1, latest)
    detail_table, summary_table = (
        ("audit_detail", "audit_summary") if args.full else ("detail", "summary")
    )
    deliveries = conform(
        tables.read(spark, layout, "deliveries").filter(F.col("batch").between(first, through)),
        DELIVERIES,
    )
    scope, signalled, scope_rows = held_locally(
        spark, deliveries, None if args.full else progress_rows
    )
    target = jdbc.jdbc_target(args.database_url)
    windows = windows_of(scope_rows)
    records = jdbc.read_records_in(spark, target, windows, args.num_partitions)
    gaps = jdbc.read_gaps_in(spark, target, windows)
    tables.replace_run(
        layout, detail_table, args.run_id, reconcile(deliveries, records, gaps, scope, signalled)
    )
    # Pinned: the late copies' rows are appended to the same partition below.
    judged = tables.current_snapshot(spark, layout, detail_table)
    window_detail = conform(
        tables.run_rows(spark, layout, detail_table, args.run_id, judged), DETAIL
    )
    summary = summarize(window_detail, args.run_id)
    ledger_rows = conform(
        window_detail.filter(F.col("status") != st.DELIVERED).withColumn(
            "judged_batch", F.lit(through)
        ),
        LEDGER,
    )
    late = (
        None
        if args.full
        else _late(spark, args, layout, deliveries, scope, target, through, committed)
    )
    if late is not None:
        late_detail, late_ledger, deltas = late
        summary = merge_summary(summary, deltas, args.run_id)
        ledger_rows = ledger_rows.unionByName(late_ledger)
        tables.append(
            layout,
            detail_table,
            late_detail.withColumn("run_id", F.lit(args.run_id)),
            {tables.RUN_PROPERTY: args.run_id, tables.STEP_PROPERTY: "reconcile.late"},
        )
    tables.replace_run(layout, summary_table, args.run_id, summary)
    summary_rows = tables.run_rows(spark, layout, summary_table, args.run_id).collect()
    net: dict[str, int] = {}
    for r in summary_rows:
        net[r["status"]] = net.get(r["status"], 0) + r["count"] - r["revised"]
    counts = {
        "batches": [first, through],
        "scopes": len(scope_rows),
        "seqs": sum(v for k, v in net.items() if k != st.DUPLICATE),
        "defects": sum(net.get(k, 0) for k in st.DEFECTS),
        **net,
    }
    if args.full:
        return {"seconds": timer.seconds, **counts, **_compare(args, house, summary_rows)}
    tables.replace_run(layout, "ledger", args.run_id, ledger_rows)
    detail = tables.run_rows(spark, layout, "detail", args.run_id)
    repairs_open = (
        detail.filter(F.col("status").isin(*st.REPAIRABLE) & F.col("source_hash").isNotNull())
        .limit(1)
        .count()
        > 0
    )
    windows_rows = [
        (
            r["consumer"],
            r["topic"],
            r["start_seq"],
            r["lo"],
            max(r["lo"], r["watermark"]),
            r["filter_node"],
        )
        for r in scope_rows
        if r["start_seq"] is not None and r["watermark"] is not None
    ]
    if hook:
        hook("reconcile.committing")
    with store.connect(args.database_url, transaction=True) as conn:
        runs.commit_reconcile(
            conn,
            house,
            args.run_id,
            (first, through),
            repairs_open,
            windows_rows,
            [
                (r["consumer"], r["topic"], r["status"], r["count"], r["revised"])
                for r in summary_rows
            ],
        )
    figures = {"seconds": timer.seconds, **counts, "late": late is not None}
    store.record_step(args, "reconcile", figures)
    store.record_snapshots(args, spark, layout, ("detail", "summary", "ledger"))
    return figures


def _compare(args, house: str, summary_rows: list) -> dict:
    full = {
        (r["consumer"], r["topic"], r["status"]): r["count"] - r["revised"]
        for r in summary_rows
        if r["count"] - r["revised"]
    }
    with store.connect(args.database_url) as conn:
        incremental = runs.cumulative_summary(conn, house)
    keys = sorted(set(full) | set(incremental))
    differences = [
        (k, incremental.get(k, 0), full.get(k, 0))
        for k in keys
        if incremental.get(k, 0) != full.get(k, 0)
    ]
    return {
        "agree": not differences,
        "differences": [
            f"{c}/{t}/{s}: incremental {i}, full {f}" for (c, t, s), i, f in differences[:20]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spark = build_session("auditsync-reconcile", args.master)
    figures = run(spark, args)
    progress.emit("reconcile", figures["seconds"], figures)
    stop_session(spark)
    return 0 if figures.get("agree", True) else 1


if __name__ == "__main__":
    sys.exit(main())
