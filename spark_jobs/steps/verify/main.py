"""verify's entry point: the pipeline's quality gate.

    spark-submit spark_jobs/steps/verify/main.py --work DIR --run-id ID [--examples N]

Counts the defects (silent_gap, mismatch, phantom) of this run's verdicts, and of earlier runs
whose repairs were still open, that the audit log does not repair; writes them to the run's
partition of the Iceberg table ``remaining``, and in one PostgreSQL transaction records
found/remaining counts and example seqs in ``reconcile_summary``, which runs still have open
repairs, and the run's outcome in ``pipeline_runs``. Prints a readable summary; exits 1 when
anything remains. The audit log is read only in the topics the defects are in, bounded by their
seqs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import tlog_run
from spark_jobs.common import local_rows, plan_size, progress, step_cache, store
from spark_jobs.common import statuses as st
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.seq_ranges import inside
from spark_jobs.common.session import build_session, stop_session
from spark_jobs.steps.verify.index_check import render as render_index
from spark_jobs.steps.verify.index_check import verify_index
from spark_jobs.steps.verify.transforms import LEFT, defect_report, remaining_defects
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.schemas import AUDIT_LOG, DETAIL, conform
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs, tlog_runs


def build_parser():
    parser = job_parser("verify", "Fail when defects remain after backfill.")
    parser.add_argument("--work", required=True, help="the warehouse root")
    parser.add_argument("--examples", type=int, default=5, help="example seqs per group")
    add_database(parser)
    return parser


def render(report: list) -> str:
    """The human-readable verdict: one line per consumer, topic and defect status."""
    left = [r for r in report if r["remaining"] > 0]
    if not report:
        return "verify: no defects found"
    lines = [
        (
            f"verify: {sum(r['remaining'] for r in report)} of "
            f"{sum(r['found'] for r in report)} defects remain after backfill"
        )
    ]
    for r in sorted(report, key=lambda r: (r["consumer"], r["topic"], r["status"])):
        examples = ", ".join(str(s) for s in r["example_seqs"] or [])
        lines.append(
            f"  {r['consumer']:<20} {r['topic']:<24} {r['status']:<11} "
            f"found {r['found']:>8}  remaining {r['remaining']:>8}"
            + (f"  e.g. seq {examples}" if examples else "")
        )
    if not left:
        lines.append("verify: every defect was repaired")
    return "\n".join(lines)


def defect_bounds(defects: DataFrame) -> list[tuple[str, int, int]]:
    """Per topic of the defects, the lowest and highest seq they cover (none: no defects)."""
    return [
        (r["topic"], r["lo"], r["hi"])
        for r in defects.groupBy("topic")
        .agg(F.min("seq").alias("lo"), F.max("seq_to").alias("hi"))
        .collect()
    ]


def audit_rows_for(warehouse: Warehouse, bounds: list[tuple[str, int, int]]) -> DataFrame:
    """The audit-log rows a defect check needs: its topics' partitions, seqs in bounds."""
    return conform(warehouse.read("audit_log").filter(inside(bounds)), AUDIT_LOG)


def check_the_log(
    layout: Layout, source_url: str, pipeline_url: str, signing_key: str | None = None
) -> tlog_run.RunLog:
    """The signed audit log's check and growth (``spark_jobs.tlog_run``), recorded with the run;
    a failed check fails the run, naming the topic and the first bad seq; the source_rewound
    ranges this run's reconcile recorded make a fork where they changed signed seqs. The key is
    ``signing_key`` (a Spark Connect task's), else the settings'."""
    from watch_service import settings as settings_mod

    with store.connect(pipeline_url) as conn:
        previous = tlog_runs.last_checkpoints(conn, layout.catalog, layout.run_id)
        row = runs.get_run(conn, layout.run_id)
    steps = (row[3] if row else None) or {}
    rewound = (steps.get("reconcile") or {}).get("rewound") or {}
    log = tlog_run.check_and_publish(
        layout,
        source_url,
        settings_mod.load(log_signing_key=signing_key),
        previous,
        rewound=rewound,
        pipeline_url=pipeline_url,
    )
    with store.connect(pipeline_url, transaction=True) as conn:
        tlog_runs.record(conn, layout.run_id, log.status, log.checkpoints)
        if log.failure is not None:
            runs.mark_failed(conn, layout.run_id, "verify", f"audit log: {log.failure}")
    progress.say(f"verify: signed audit log {log.status}")
    return log


def check_the_index(layout: Layout, source_url: str, pipeline_url: str) -> dict:
    """The search index checked and repaired (``index_check``); a document still wrong after
    the repair fails the run."""
    index = verify_index(source_url, pipeline_url, layout.catalog, layout.run_id)
    if index["remaining"]:
        with store.connect(pipeline_url, transaction=True) as conn:
            runs.mark_failed(
                conn,
                layout.run_id,
                "verify",
                f"search index: {index['remaining']} documents still wrong after repair",
            )
    progress.say(render_index(index))
    return index


@step_cache.releases_cache
def run(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None = None,
    warehouse: Warehouse | None = None,
    quick: bool = True,
) -> dict:
    """Check; returns the step's figures (``passed``). ``hook(point)`` is called just before
    the PostgreSQL commit. ``warehouse``: the runner's (default: attached from ``--work`` and
    ``--run-id``). ``quick``: a run with no verdict and no open repair carried counts no
    defect without a Spark job; False counts them all the same (tests compare the two)."""
    timer = progress.Timer()
    pipeline_url = store.pipeline_url(args)
    wh = warehouse or Warehouse.attach(spark, Layout("", args.work, args.run_id), pipeline_url)
    with store.connect(pipeline_url) as conn:
        carried = runs.open_repairs(conn, wh.layout.catalog, args.run_id)
        batches = runs.run_batches(conn, args.run_id) or (1, 0)
    # Over few delivery rows the plans run interpreted (``plan_size``).
    with plan_size.sized(spark, wh.batch_rows(*batches)):
        return _check(spark, args, hook, wh, timer, carried, quick)


def _check(
    spark: SparkSession,
    args,
    hook: Callable[[str], None] | None,
    wh: Warehouse,
    timer: progress.Timer,
    carried: list[str],
    quick: bool = True,
) -> dict:
    pipeline_url = store.pipeline_url(args)
    layout = wh.layout
    own = conform(wh.run_rows("detail", args.run_id), DETAIL).withColumn(
        "run_id", F.lit(args.run_id)
    )
    older = wh.run_details(carried).filter(
        F.col("status").isin(*st.REPAIRABLE) & F.col("source_hash").isNotNull()
    )
    detail = own.unionByName(older).filter(F.col("status").isin(*st.DEFECTS))
    # No verdict of the run's and no open repair carried (an interval that brought nothing):
    # no defect, known from the table's metadata instead of a job over the empty partition.
    quiet = quick and not carried and not wh.holds_run("detail", args.run_id)
    if not quiet:
        detail = step_cache.cache(detail)
    bounds = [] if quiet else defect_bounds(detail)
    # No defect (a clean run): nothing remains, and nothing is left to read or report. Else
    # the remaining rows are computed once (cached), written, and reported from the cache.
    remaining = (
        step_cache.cache(conform(remaining_defects(detail, audit_rows_for(wh, bounds)), LEFT))
        if bounds
        else local_rows.empty(spark, LEFT)
    )
    if not (quiet and not wh.holds_run("remaining", args.run_id)):
        wh.replace_run("remaining", args.run_id, remaining)  # else: empty, and stays so
    report = defect_report(detail, remaining, args.examples).collect() if bounds else []
    still_open = (
        sorted(
            {
                r["run_id"]
                for r in remaining.filter(
                    F.col("status").isin(*st.REPAIRABLE) & F.col("source_hash").isNotNull()
                )
                .select("run_id")
                .distinct()
                .collect()
            }
        )
        if bounds
        else []
    )
    mine = [r for r in report if r["run_id"] == args.run_id]
    carried_left = sum(r["remaining"] for r in report if r["run_id"] != args.run_id)
    if hook:
        hook("verify.committing")
    with store.connect(pipeline_url, transaction=True) as conn:
        passed = runs.record_verify(
            conn,
            args.run_id,
            [
                (
                    r["consumer"],
                    r["topic"],
                    r["status"],
                    r["found"],
                    r["remaining"],
                    r["example_seqs"],
                )
                for r in mine
            ],
            st.DEFECTS,
            carried,
            carried_left,
            still_open,
        )
    log_started = progress.Timer()
    log = check_the_log(
        layout, args.database_url, pipeline_url, getattr(args, "log_signing_key", None)
    )
    log_seconds = log_started.seconds
    index = check_the_index(layout, args.database_url, pipeline_url)
    passed = passed and log.ok and index["remaining"] == 0
    counts = {
        "found": sum(r["found"] for r in mine),
        "remaining": sum(r["remaining"] for r in mine),
        "carried_left": carried_left,
        "passed": passed,
        "carried_runs": len(carried),
        "log": log.status.split(":", 1)[0],
        "log_seconds": round(log_seconds, 3),
        "index": index,
    }
    figures = {"seconds": timer.seconds, **counts, "log_failure": log.failed_at()}
    store.record_step(args, "verify", figures)
    store.record_snapshots(args, wh, ("remaining",))
    progress.say(render(report))
    return figures


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure()
    spark = build_session("auditsync-verify", args.master)
    figures = run(spark, args)
    progress.emit("verify", figures["seconds"], figures)
    stop_session(spark)
    return 0 if figures["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
