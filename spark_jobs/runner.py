"""``auditsync pipeline run``: the reconciliation pipeline on this machine, without Airflow.

    auditsync pipeline run --landing DIR --work DIR [--run-id ID] [--database-url URL]
                           [--master local[2]] [--driver-memory 2g] [--num-partitions 4]
                           [--conf KEY=VALUE ...]

Runs compact -> reconcile -> backfill -> verify, each job's ``main.py`` through the venv's
``spark-submit`` (the same mains Airflow's SparkSubmitOperator runs), printing one progress
line per step (name, seconds, key counts). Exit status: 0 when verify passes, 1 when defects
remain after backfill, 2 when a step fails to run. Layout under ``--work``::

    deliveries/                    compact's output (rebuilt every run)
    audit_log/                     the audit log (carried forward run to run)
    runs/<run_id>/detail/          reconcile's per-seq statuses
    runs/<run_id>/summary/         reconcile's per-status counts
    runs/<run_id>/remaining/       verify's defects left after backfill
    runs/<run_id>/<step>.log       each step's Spark log
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from spark_jobs.layout import STEPS, Layout

EXIT_FAILED_GATE = 1
EXIT_STEP_ERROR = 2
JOBS_DIR = Path(__file__).resolve().parent.parent / "spark_jobs"


def submit_command(step: str, args: list[str], master: str, driver_memory: str,
                   conf: list[str] = ()) -> list[str]:
    from spark_jobs.common.session import submit_flags

    spark_submit = Path(sys.executable).parent / "spark-submit"
    confs = [x for kv in ["spark.ui.enabled=false", *conf] for x in ("--conf", kv)]
    return [str(spark_submit), "--master", master, "--driver-memory", driver_memory,
            *submit_flags(), *confs, str(JOBS_DIR / step / "main.py"), *args]


def run_step(step: str, command: list[str], log_path: Path) -> tuple[int, dict | None, list[str]]:
    """Run one job; its Spark log goes to ``log_path``. Returns (exit code, result, output)."""
    from spark_jobs.common import progress

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with log_path.open("w") as log:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    lines = proc.stdout.splitlines()
    output = [line for line in lines if not line.startswith(progress.PREFIX)]
    return proc.returncode, progress.parse(lines), output


def progress_line(step: str, seconds: float, result: dict | None) -> str:
    figures = {k: v for k, v in (result or {}).items() if k not in ("step", "seconds")}
    shown = "  ".join(f"{k}={v}" for k, v in figures.items())
    return f"[pipeline] {step:<9} {seconds:7.1f} s  {shown}".rstrip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="auditsync pipeline",
                                     description="The Spark reconciliation pipeline.")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="compact -> reconcile -> backfill -> verify")
    run.add_argument("--landing", required=True, type=Path, help="the sink's landing directory")
    run.add_argument("--work", required=True, type=Path, help="where the pipeline's tables live")
    run.add_argument("--run-id", default=None, help="default: the UTC time, e.g. 20250101T120000Z")
    run.add_argument("--database-url", default=None,
                     help="default: DATABASE_URL, else the embedded cluster")
    run.add_argument("--master", default="local[2]")
    run.add_argument("--driver-memory", default="2g")
    run.add_argument("--num-partitions", type=int, default=4,
                     help="parallel JDBC queries per source table read")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                     help="extra Spark setting for every step (repeatable), e.g. for small "
                          "runs: spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1")
    return parser


def _database_url(given: str | None) -> str:
    if given:
        from watch_service.store.migrate import migrate

        migrate(given)
        return given
    from watch_service import settings as settings_mod
    from watch_service.store.database import ensure_database

    return ensure_database(settings_mod.load())


def run(args: argparse.Namespace) -> int:
    from spark_jobs.common import results
    from spark_jobs.common.session import JdbcDriverMissing

    run_id = args.run_id or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    layout = Layout(args.landing.resolve(), args.work.resolve(), run_id)
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        url = _database_url(args.database_url)
        results.start_run(url, run_id)
    except psycopg.OperationalError as exc:
        print(f"[pipeline] cannot use the database: {exc}".rstrip(), file=sys.stderr, flush=True)
        return EXIT_STEP_ERROR
    print(f"[pipeline] run {run_id}: landing {layout.landing}, work {layout.work}", flush=True)
    started = time.monotonic()
    try:
        commands = {step: submit_command(step, layout.step_args(step, url, args.num_partitions),
                                         args.master, args.driver_memory, args.conf)
                    for step in STEPS}
    except JdbcDriverMissing as exc:
        results.mark_failed(url, run_id)
        print(f"[pipeline] {exc}", file=sys.stderr, flush=True)
        return EXIT_STEP_ERROR
    for step in STEPS:
        command = commands[step]
        t0 = time.monotonic()
        code, result, output = run_step(step, command, layout.run_dir / f"{step}.log")
        print(progress_line(step, time.monotonic() - t0, result), flush=True)
        for line in output:
            print(f"           {line}", flush=True)
        if step == "verify" and code == EXIT_FAILED_GATE and result is not None:
            print(f"[pipeline] FAILED quality gate: defects remain after backfill "
                  f"(run {run_id}, {time.monotonic() - started:.1f} s)", flush=True)
            return EXIT_FAILED_GATE
        if code != 0 or result is None:
            log = layout.run_dir / f"{step}.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            print(f"[pipeline] step {step} failed (exit {code}); log {log}:\n{tail}",
                  file=sys.stderr, flush=True)
            results.mark_failed(url, run_id)
            return EXIT_STEP_ERROR
    print(f"[pipeline] passed (run {run_id}, {time.monotonic() - started:.1f} s)", flush=True)
    return 0


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "run":
        return run(args)
    return EXIT_STEP_ERROR


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
