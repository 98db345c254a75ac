"""``auditsync pipeline``: the reconciliation pipeline on this machine, without Airflow.

    auditsync pipeline run   --landing LOCATION --work LOCATION [--run-id ID] [--database-url URL]
                             [--master local[2]] [--driver-memory 2g] [--num-partitions 4]
                             [--keep-runs 96] [--conf KEY=VALUE ...]
    auditsync pipeline audit --landing LOCATION --work LOCATION [same options]
    auditsync pipeline findings --run RUN_ID [--work LOCATION] [--json] [filters]
    auditsync pipeline convert --work LOCATION [--database-url URL] [--master local[2]] ...
    auditsync pipeline move-state [--database-url URL] [--pipeline-database-url URL]

Every action takes ``--pipeline-database-url`` (default ``AUDITSYNC_PIPELINE_DATABASE_URL``,
else the source's database): where the Iceberg catalog, the run tables, the digests and the
alert ledger live. A run whose pipeline database is empty while the source's holds that state
stops with one line naming ``move-state``, which moves it there once
(``watch_service.store.pipeline_state``).

``findings`` prints a run's defect ranges and whether each was repaired (no Spark session:
``spark_jobs.findings_command`` renders what ``spark_jobs.findings`` reads).

``run`` is one incremental run: compact -> reconcile -> backfill -> verify, each step's
``run(spark, args)`` called in turn in ONE Spark session (one JVM start per run, not four),
printing one progress line per step (name, seconds, key counts). The runner opens the
warehouse once (``spark_jobs.warehouse.warehouse.Warehouse``) and hands it to every step.
Each step costs what the run's interval brought (see spark_jobs/warehouse/layout.py for the
warehouse's Iceberg tables). A location is a path, ``file://…`` or ``s3://bucket/prefix``;
any other scheme exits 2. After the run, the per-run rows of runs older than the newest
``--keep-runs`` (default ``AUDITSYNC_KEEP_RUNS``, else 96) are deleted, in Iceberg and in the
run tables (``spark_jobs.lifecycle``: the run lifecycle the DAG shares). Exit status: 0 when verify
passes, 1 when defects remain after backfill or the signed audit log does not verify (the
line names its topic and first bad seq), 2 when a step fails to run.

``convert`` turns a warehouse the hand-written Parquet layouts left into the Iceberg tables,
once (``spark_jobs.legacy``); a run meeting such a warehouse stops at its first step with one
line naming this command.

``audit`` compacts what is new, then re-judges ALL history the incremental runs consumed
from scratch (``reconcile --full``) and compares, per consumer, topic and status, with the
sum of the incremental runs' verdicts: exit 0 when they agree, 1 when they do not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable

import psycopg

from spark_jobs import findings_command, lifecycle
from spark_jobs.common import progress
from spark_jobs.warehouse.layout import STEPS, Layout, step_package
from watch_service.settings import SettingsError
from watch_service.store.pipeline_state import PipelineStateError

EXIT_FAILED_GATE = 1
EXIT_STEP_ERROR = 2


def progress_line(step: str, seconds: float, result: dict | None) -> str:
    # The log's failure and the re-delivery ranges have lines of their own.
    hidden = ("step", "seconds", "log_failure", "redelivered")
    figures = {k: v for k, v in (result or {}).items() if k not in hidden}
    shown = "  ".join(f"{k}={v}" for k, v in figures.items())
    return f"[pipeline] {step:<9} {seconds:7.1f} s  {shown}".rstrip()


def gate_failure(verify: dict) -> str:
    """Why verify failed the run's gate, from its figures: the defects left, the signed audit
    log's failure (its topic and first bad seq, as verify's own line names them), or both."""
    why = []
    if verify.get("remaining") or verify.get("carried_left") or not verify.get("log_failure"):
        why.append("defects remain after backfill")
    if verify.get("log_failure"):
        why.append(f"the signed audit log does not verify: {verify['log_failure']['why']}")
    return "; ".join(why)


def keep_count(raw: str) -> int:
    try:
        return lifecycle.check_keep(raw, "--keep-runs")
    except SettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="auditsync pipeline", description="The Spark reconciliation pipeline."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    for action, text in (
        ("run", ("one incremental run: compact -> reconcile -> backfill -> verify")),
        ("audit", "re-judge all history and compare with the runs"),
        ("convert", "convert a hand-written-layout warehouse into the Iceberg tables, once"),
    ):
        p = sub.add_parser(action, help=text)
        p.add_argument(
            "--landing",
            required=action != "convert",
            default="",
            help="the sink's landing zone: a path, file:// or s3://",
        )
        p.add_argument(
            "--work", required=True, help="the warehouse: a path, file:// or s3://bucket/prefix"
        )
        p.add_argument(
            "--run-id", default=None, help="default: the UTC time, e.g. 20250101T120000Z"
        )
        add_urls(p)
        p.add_argument("--master", default="local[2]")
        p.add_argument("--driver-memory", default="2g")
        p.add_argument(
            "--num-partitions",
            type=int,
            default=4,
            help="parallel JDBC queries per source table read",
        )
        p.add_argument(
            "--keep-runs",
            type=keep_count,
            default=None,
            help=f"keep the outputs of this many newest runs (default {lifecycle.KEEP_RUNS_ENV}, "
            f"else {lifecycle.KEEP_RUNS})",
        )
        p.add_argument(
            "--conf",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="extra Spark setting (repeatable)",
        )
    add_urls(findings_command.add_parser(sub))
    add_urls(
        sub.add_parser(
            "move-state",
            help="move the pipeline's state from the source's database to its own, once",
        )
    )
    return parser


def add_urls(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--database-url", default=None, help="default: DATABASE_URL, else the embedded cluster"
    )
    p.add_argument(
        "--pipeline-database-url",
        dest="pipeline_url",
        default=None,
        help="the pipeline's own state (default: AUDITSYNC_PIPELINE_DATABASE_URL, else the "
        "source's database)",
    )


def _pipeline_url(given: str | None, source_url: str, check: bool = True) -> str:
    """The pipeline's database, migrated: ``given``, else the settings', else the source's.
    With ``check``, one apart from the source that is empty while the source holds the
    pipeline's state is refused (``pipeline_state.refusal``)."""
    from watch_service import settings as settings_mod
    from watch_service.store import pipeline_state
    from watch_service.store.database import pipeline_url
    from watch_service.store.migrate import migrate

    url = given or pipeline_url(settings_mod.load(), source_url)
    if url == source_url:
        return url
    migrate(url)
    if check:
        with (
            psycopg.connect(source_url, autocommit=True) as source,
            psycopg.connect(url, autocommit=True) as pipeline,
        ):
            pipeline_state.check_apart(source, pipeline)
    return url


def move_state(source_url: str, pipeline_url: str) -> int:
    """``move-state``: the pipeline's tables from the source's database to its own, once."""
    from watch_service.store import pipeline_state
    from watch_service.store.database import mask_url

    if pipeline_url == source_url:
        progress.say(
            "[pipeline] move-state: no pipeline database apart from the source "
            "(set AUDITSYNC_PIPELINE_DATABASE_URL or --pipeline-database-url)",
            sys.stderr,
            level="ERROR",
        )
        return EXIT_STEP_ERROR
    with (
        psycopg.connect(source_url, autocommit=True) as source,
        psycopg.connect(pipeline_url, autocommit=True) as pipeline,
    ):
        moved = pipeline_state.move(source, pipeline)
    shown = ", ".join(f"{t} {n}" for t, n in moved.items() if n)
    progress.say(
        f"[pipeline] moved the pipeline's state to {mask_url(pipeline_url)}: "
        f"{shown or 'nothing to move'}"
    )
    return 0


def _database_url(given: str | None) -> str:
    if given:
        from watch_service.store.migrate import migrate

        migrate(given)
        return given
    from watch_service import settings as settings_mod
    from watch_service.store.database import ensure_database

    return ensure_database(settings_mod.load())


def _step_module(step: str):
    import importlib

    return importlib.import_module(f"{step_package(step)}.main")


def run_steps(
    spark,
    layout: Layout,
    database_url: str,
    partitions: int = 4,
    steps: tuple[str, ...] = STEPS,
    hook: Callable[[str], None] | None = None,
    done: list[str] | None = None,
    pipeline_url: str | None = None,
) -> dict[str, dict]:
    """Each step's ``run`` in turn with this session and one ``Warehouse`` attached to it;
    returns their figures by step, and appends each step that ran to ``done``. A step that
    raises stops the run (the exception propagates), as does a warehouse that cannot be
    attached (an old hand-written layout: the first step is the one that failed).
    ``pipeline_url`` None: the pipeline's state (the catalog too) is in the source's database."""
    from spark_jobs.warehouse.warehouse import Warehouse

    out: dict[str, dict] = {}
    warehouse = Warehouse.attach(spark, layout, pipeline_url or database_url)
    for step in steps:
        args = layout.namespace(step, database_url, partitions, pipeline_url)
        t0 = time.monotonic()
        module = _step_module(step)
        figures = module.run(spark, args, hook, warehouse)
        out[step] = figures
        if done is not None:
            done.append(step)
        progress.say(progress_line(step, time.monotonic() - t0, figures))
        for line in redelivery_lines(figures):
            progress.say(f"[pipeline] re-delivered: {line}")
    return out


def redelivery_lines(figures: dict | None) -> list[str]:
    """compact's re-delivery ranges (``redelivered``), one line each (pure)."""
    from watch_service.protocol.redelivery import Redelivery, describe

    return [
        describe(item["consumer"], [Redelivery.parse(item)])[0]
        for item in (figures or {}).get("redelivered") or ()
    ]


def audit(
    spark, layout: Layout, database_url: str, partitions: int = 4, pipeline_url: str | None = None
) -> dict:
    """Compact what is new, then ``reconcile --full``: figures with ``agree`` and
    ``differences``."""
    run_steps(
        spark, layout, database_url, partitions, steps=("compact",), pipeline_url=pipeline_url
    )
    from spark_jobs.steps.reconcile.main import run as reconcile
    from spark_jobs.warehouse.warehouse import Warehouse

    args = layout.namespace("reconcile", database_url, partitions, pipeline_url, full=True)
    warehouse = Warehouse.attach(spark, layout, pipeline_url or database_url)
    figures = reconcile(spark, args, None, warehouse)
    progress.say(progress_line("audit", figures["seconds"], figures))
    return figures


def _session(args: argparse.Namespace):
    from spark_jobs.common.session import build_session

    conf = dict(kv.split("=", 1) for kv in args.conf)
    conf.setdefault("spark.driver.memory", args.driver_memory)
    conf.setdefault("spark.ui.enabled", "false")
    return build_session("auditsync-pipeline", master=args.master, conf=conf)


def convert(spark, layout: Layout, database_url: str) -> int:
    """``convert`` with an existing session: the old layout's rows into the Iceberg tables,
    once; exit 0 (also when there was nothing to convert). ``database_url`` is the pipeline's
    (the old layout's rows and the catalog are both the pipeline's state)."""
    from spark_jobs import legacy
    from spark_jobs.warehouse import tables

    tables.create(spark, layout, database_url)
    if legacy.convert(spark, layout, database_url) is None:
        progress.say(f"[pipeline] {layout.work}: no hand-written layout, nothing to convert")
    return 0


def execute(spark, args: argparse.Namespace, url: str, pipeline: str | None = None) -> int:
    """One ``run``, ``audit`` or ``convert`` with an existing session; the exit status.
    ``url`` is the source's database, ``pipeline`` the pipeline's (None: the source's)."""
    from spark_jobs.common import store

    run_id = args.run_id or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    layout = Layout(args.landing, args.work, run_id)
    started = time.monotonic()
    own = pipeline or url
    if args.action == "convert":
        return convert(spark, layout, own)
    if args.action == "audit":
        figures = audit(spark, layout, url, args.num_partitions, pipeline)
        for line in figures["differences"]:
            progress.say(f"[pipeline] differs: {line}")
        verdict = "agrees with" if figures["agree"] else "DISAGREES with"
        progress.say(
            f"[pipeline] full audit {run_id} {verdict} the incremental runs "
            f"({time.monotonic() - started:.1f} s)"
        )
        return 0 if figures["agree"] else EXIT_FAILED_GATE
    with store.connect(own) as conn:
        lifecycle.start(conn, run_id, layout.catalog)
    progress.say(f"[pipeline] run {run_id}: landing {layout.landing}, work {layout.work}")
    done: list[str] = []
    try:
        figures = run_steps(
            spark, layout, url, args.num_partitions, hook=None, done=done, pipeline_url=pipeline
        )
    except Exception as exc:
        failed = next((s for s in STEPS if s not in done), STEPS[-1])
        with store.connect(own) as conn:
            lifecycle.fail(conn, run_id, failed, exc, layout.catalog)
        progress.say(
            f"[pipeline] run {run_id} failed in {failed}: {type(exc).__name__}: {exc}",
            sys.stderr,
            level="ERROR",
        )
        return EXIT_STEP_ERROR
    pruning = time.monotonic()
    removed = lifecycle.prune(own, layout, args.keep_runs or lifecycle.KEEP_RUNS, url)
    if removed:
        progress.say(
            f"[pipeline] retention: removed the outputs of {len(removed)} old run(s) "
            f"({time.monotonic() - pruning:.1f} s)"
        )
    if not figures["verify"]["passed"]:
        progress.say(
            f"[pipeline] FAILED quality gate: {gate_failure(figures['verify'])} "
            f"(run {run_id}, {time.monotonic() - started:.1f} s)"
        )
        return EXIT_FAILED_GATE
    progress.say(f"[pipeline] passed (run {run_id}, {time.monotonic() - started:.1f} s)")
    return 0


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    progress.configure()
    if args.action == "findings":  # a read with pyiceberg: no Spark session
        try:
            source = _database_url(args.database_url)
            url = _pipeline_url(args.pipeline_url, source, check=False)
            return findings_command.main(args, url)
        except psycopg.OperationalError as exc:
            progress.say(
                f"[pipeline] cannot use the database: {exc}".rstrip(), sys.stderr, level="ERROR"
            )
            return EXIT_STEP_ERROR
    if args.action == "move-state":
        try:
            source = _database_url(args.database_url)
            return move_state(source, _pipeline_url(args.pipeline_url, source, check=False))
        except psycopg.OperationalError as exc:
            progress.say(
                f"[pipeline] cannot use the database: {exc}".rstrip(), sys.stderr, level="ERROR"
            )
            return EXIT_STEP_ERROR
        except (SettingsError, PipelineStateError) as exc:
            progress.say(f"[pipeline] move-state: {exc}", sys.stderr, level="ERROR")
            return EXIT_STEP_ERROR
    from spark_jobs.common.session import JdbcDriverMissing
    from watch_service.storage import Location, StorageError

    try:
        Location.parse(args.work)
        if args.landing:
            Location.parse(args.landing)
        if args.keep_runs is None:
            args.keep_runs = lifecycle.keep_runs(os.environ)
    except (StorageError, SettingsError) as exc:
        progress.say(f"[pipeline] {exc}", sys.stderr, level="ERROR")
        return EXIT_STEP_ERROR

    try:
        url = _database_url(args.database_url)
        pipeline = _pipeline_url(args.pipeline_url, url)
    except psycopg.OperationalError as exc:
        progress.say(
            f"[pipeline] cannot use the database: {exc}".rstrip(), sys.stderr, level="ERROR"
        )
        return EXIT_STEP_ERROR
    except (SettingsError, PipelineStateError) as exc:
        progress.say(f"[pipeline] {exc}", sys.stderr, level="ERROR")
        return EXIT_STEP_ERROR
    try:
        spark = _session(args)
    except JdbcDriverMissing as exc:
        progress.say(f"[pipeline] {exc}", sys.stderr, level="ERROR")
        return EXIT_STEP_ERROR
    try:
        return execute(spark, args, url, None if pipeline == url else pipeline)
    finally:
        from spark_jobs.common.session import stop_session

        stop_session(spark)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
