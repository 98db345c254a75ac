"""verify's entry point: the pipeline's quality gate.

    spark-submit spark_jobs/verify/main.py --detail DIR --audit-log DIR --out DIR
        --database-url URL --run-id ID [--examples N]

Counts the defects (silent_gap, mismatch, phantom) reconcile found that the audit log does not
repair, writes them to ``<out>`` (Parquet), records found/remaining counts and example seqs in
``reconcile_summary`` and the run's outcome in ``pipeline_runs``, prints a readable summary,
and exits 1 when anything remains.
"""
from __future__ import annotations

import sys

from spark_jobs.common import progress, results, storage
from spark_jobs.common.cli import add_database, job_parser
from spark_jobs.common.schemas import AUDIT_LOG, DETAIL
from spark_jobs.common.session import build_session
from spark_jobs.verify.transforms import defect_report, remaining_defects


def build_parser():
    parser = job_parser("verify", "Fail when defects remain after backfill.")
    parser.add_argument("--detail", required=True, help="reconcile's <out>/detail")
    parser.add_argument("--audit-log", required=True, help="the audit log backfill wrote")
    parser.add_argument("--out", required=True, help="remaining defects, one row per seq")
    parser.add_argument("--examples", type=int, default=5, help="example seqs per group")
    add_database(parser)
    return parser


def render(report: list) -> str:
    """The human-readable verdict: one line per consumer, topic and defect status."""
    left = [r for r in report if r["remaining"] > 0]
    if not report:
        return "verify: no defects found"
    lines = [f"verify: {sum(r['remaining'] for r in report)} of "
             f"{sum(r['found'] for r in report)} defects remain after backfill"]
    for r in sorted(report, key=lambda r: (r["consumer"], r["topic"], r["status"])):
        examples = ", ".join(str(s) for s in r["example_seqs"] or [])
        lines.append(f"  {r['consumer']:<20} {r['topic']:<24} {r['status']:<11} "
                     f"found {r['found']:>8}  remaining {r['remaining']:>8}"
                     + (f"  e.g. seq {examples}" if examples else ""))
    if not left:
        lines.append("verify: every defect was repaired")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    timer = progress.Timer()
    spark = build_session("auditsync-verify", args.master)
    detail = spark.read.schema(DETAIL).parquet(args.detail)
    previous = storage.current(spark, args.audit_log.rstrip("/"))
    audit_log = (spark.read.schema(AUDIT_LOG).parquet(previous) if previous
                 else spark.createDataFrame([], AUDIT_LOG))
    remaining_defects(detail, audit_log).write.mode("overwrite").parquet(args.out)
    remaining = spark.read.schema(DETAIL).parquet(args.out)
    report = defect_report(detail, remaining, args.examples).collect()
    passed = all(r["remaining"] == 0 for r in report)
    results.record_verify(args.database_url, args.run_id,
                          [(r["consumer"], r["topic"], r["status"], r["found"], r["remaining"],
                            r["example_seqs"]) for r in report], passed)
    counts = {"found": sum(r["found"] for r in report),
              "remaining": sum(r["remaining"] for r in report), "passed": passed}
    results.record_step(args.database_url, args.run_id, "verify",
                        {"seconds": timer.seconds, **counts})
    print(render(report), flush=True)
    progress.emit("verify", timer.seconds, counts)
    spark.stop()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
