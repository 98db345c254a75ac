"""audit_sync: reconcile what the sinks received against PostgreSQL, every data interval."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetAlias, CronDataIntervalTimetable

from auditsync_plugin import connect_session, deadlines, step_args
from auditsync_plugin.notifications import notifiers
from auditsync_plugin.operators.pipeline import (
    PublishOperator,
    QualityCheckpointOperator,
    StartRunOperator,
)
from auditsync_plugin.operators.run_lifecycle import FinishRunOperator, keep_runs, with_run_failed
from auditsync_plugin.operators.spark_step import SparkStepOperator
from auditsync_plugin.retries import retry_args
from auditsync_plugin.sensors.sink_cursors import SinkCursorSensor

PROJECT = step_args.project()
# Parse-time settings come from the process environment only (no Variable/DB lookups here:
# the DAG processor parses this file constantly). See watch_service/tools/airflow_env.py.
SCHEDULE = os.environ.get("AUDITSYNC_SCHEDULE", "*/15 * * * *")
SPARK_SUBMIT = os.environ.get(
    "AUDITSYNC_SPARK_SUBMIT", str(Path(sys.executable).with_name("spark-submit"))
)
SENSOR_TIMEOUT_S = float(os.environ.get("AUDITSYNC_SENSOR_TIMEOUT_S", 30 * 60))
ALERTS = notifiers.AlertSettings.from_env(os.environ)
_, DEADLINE = deadlines.verify_deadline(SCHEDULE, os.environ.get("AUDITSYNC_VERIFY_DEADLINE_S"))
RETRY_ARGS = retry_args(os.environ)  # AUDITSYNC_RETRY_DELAY_S: the first retry's delay
KEEP_RUNS = keep_runs(os.environ)  # AUDITSYNC_KEEP_RUNS: bad -> an import error

# The pipeline's run id is a function of the data interval, so re-running a run (or clearing
# a task) rewrites the same outputs instead of adding new ones.
RUN_ID = (
    "audit_sync_{{ data_interval_start.strftime('%Y%m%dT%H%M%SZ') }}"
    "_{{ data_interval_end.strftime('%Y%m%dT%H%M%SZ') }}"
)
PATHS = step_args.Paths(
    landing="{{ var.value.auditsync_landing }}",
    warehouse="{{ var.value.auditsync_warehouse }}",
    run_id=RUN_ID,
)
CONSUMERS = "{{ var.value.get('auditsync_consumers', '') }}"
# Handed to the steps in their environment, never in a process's arguments (visible in `ps`).
STEP_ENV = step_args.STEP_ENV
# verify signs the audit log with the password of the connection auditsync_log_key (a note
# signing key, `auditsync audit-log keygen`); without it the run's log is recorded unsigned.
VERIFY_ENV = {
    **STEP_ENV,
    "AUDITSYNC_LOG_SIGNING_KEY": (
        "{{ (conn.get('auditsync_log_key').password or '') "
        "if conn.get('auditsync_log_key') else '' }}"
    ),
}

AUDIT_LOG = Asset(
    name="auditsync_audit_log", uri="auditsync://warehouse/audit_log", group="auditsync"
)
SEARCH_INDEX = Asset(
    name="auditsync_search_index", uri="auditsync://postgres/search_documents", group="auditsync"
)
RECONCILIATION = Asset(
    name="auditsync_reconciliation", uri="auditsync://warehouse/runs", group="auditsync"
)
QUALITY_REPORT = Asset(
    name="auditsync_quality_report", uri="auditsync://gx/data_docs", group="auditsync"
)
# Resolved at run time to the datasets the run wrote, named as its OpenLineage events name
# them: iceberg://<catalog>/audit.audit_log, audit.detail, audit.summary and the search index's
# postgres://host:port/<db>/public/search_documents (auditsync_plugin.lineage).
WAREHOUSE_TABLES = AssetAlias(name="auditsync_warehouse_tables", group="auditsync")


def failed_marks_run(**callbacks: Any) -> dict[str, Any]:
    """A task's callbacks, with the one that marks the run failed when it fails for good."""
    return with_run_failed(callbacks, RUN_ID, PATHS.warehouse)


def spark_job(
    task_id: str, job: str, target: str | None = None, **callbacks: Any
) -> SparkStepOperator:
    """One step: over Spark Connect when ``spark_connect_default`` exists, else spark-submit
    through ``spark_default`` (the JDBC driver from ``spark_jobs.common.session``)."""
    return SparkStepOperator(
        task_id=task_id,
        step=job,
        application=step_args.application(PROJECT, job),
        application_args=step_args.args(job, PATHS, target=target),
        env_vars=VERIFY_ENV if job == "verify" else STEP_ENV,
        conn_id="spark_default",
        spark_binary=SPARK_SUBMIT,
        name=f"audit_sync.{task_id}",
        connect_session=connect_session.TEMPLATE,
        driver_memory="1g",
        # WARN keeps the task log to what the jobs print (their result line, verify's verdict),
        # which is also what a failed task's message ends with.
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.log.level": "WARN",
        },
        **failed_marks_run(**callbacks),
    )


with DAG(
    dag_id="audit_sync",
    description="sink cursors → compact → reconcile → backfill → verify → quality → publish",
    doc_md=__doc__
    + """

Each run covers one data interval (default every 15 minutes, `AUDITSYNC_SCHEDULE`):

1. **wait_for_sinks** — every sink's cursor (`<landing>/<consumer>/state.json`) must reach the
   topic heads the watch service reports after the interval ended (polled in the task for up
   to 10 s, then deferred to the triggerer; fails, naming the lagging consumers and topics,
   after `AUDITSYNC_SENSOR_TIMEOUT_S`).
2. **start_run** — (re)marks the pipeline run as running in `pipeline_runs`.
3. **compact** — landing segments → the deliveries table (Parquet).
4. **reconcile** — PostgreSQL records and gaps against deliveries: delivered, duplicate,
   tombstoned, filtered, silent gap, mismatch, phantom …
5. **backfill_audit_log** ∥ **backfill_search_index** — re-read what is missing or mismatched
   from PostgreSQL and write it, idempotently.
6. **verify** — fails the run when a defect is left after backfill; then checks each topic's
   signed audit log against the audit log (a window of signed seqs a run, the new ones after
   backfill's repair) and signs its new checkpoint with the connection `auditsync_log_key`'s
   password (recorded `unsigned` without it). A row or tile changed after signing fails the
   run, naming the topic and the first bad seq.
7. **quality** — Great Expectations checkpoints over this run's slice (its deliveries,
   reconcile detail and summary, the audit-log partitions it wrote); Data Docs under
   *Browse → Reconciliation*. The `audit_full` DAG re-verifies all history on demand.
8. **publish** — asset events for the audit log, search index, reconciliation and report,
   and, through the alias `auditsync_warehouse_tables`, for the tables the run wrote under
   the names its OpenLineage events give them (`iceberg://<catalog>/audit.audit_log`, …).
9. **finish_run** — the teardown of `start_run`, whatever the outcome: the runs beyond the
   newest `AUDITSYNC_KEEP_RUNS` (default 96) lose their `detail`, `summary` and `remaining`
   partitions and their run-table rows; their ledger rows move to its one `(pruned)` partition
   and their digest ranges merge per block (`spark_jobs/lifecycle.py`).

A task after `start_run` that fails for good (no retry left) marks the run `failed` in
`pipeline_runs`, with the task and its one-line reason, as the Reconciliation page shows it;
clearing a task re-runs `start_run` (its setup), so the run is `running` again, then passes or
fails.

Operations: transient faults (refused connections, a PostgreSQL failover, Spark Connect
restarting) retry with exponential backoff, up to 3 times, the first after
`AUDITSYNC_RETRY_DELAY_S` (default 30 s); verdicts never retry. Alerts (off unless
`AUDITSYNC_ALERT_EMAIL` / `AUDITSYNC_ALERT_WEBHOOK` is set) go out once per run and kind when a
run finds defects, verify fails, the sinks lag past the sensor's timeout, or a data interval is
not verified within `AUDITSYNC_VERIFY_DEADLINE_S` (default 3 × the schedule) of its end.

The pipeline run id is derived from the data interval, so a re-run rewrites the same outputs.
The Spark steps run as clients of a long-running Spark Connect server when the
`spark_connect_default` connection exists (`auditsync spark-connect start`; no JVM start per
step), else each is a `spark-submit` through `spark_default` (e.g. a standalone cluster). On
Spark Connect the run's Spark tasks (the steps and quality) share one server session, drawn by
`start_run` and released by `finish_run`, so the warehouse's catalog is attached once a run.
Connections: `spark_default`, `spark_connect_default` (optional), `auditsync_watch` (HTTP),
`auditsync_pg`. Variables:
`auditsync_landing`, `auditsync_warehouse`, `auditsync_gx_root`, `auditsync_consumers`.
""",
    schedule=CronDataIntervalTimetable(SCHEDULE, timezone="UTC"),
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    # Transient faults retry with exponential backoff; findings and bugs fail at once.
    default_args={**RETRY_ARGS, "execution_timeout": timedelta(minutes=30)},
    deadline=deadlines.dag_deadline(DEADLINE, ALERTS.as_kwargs()),
    tags=["auditsync"],
) as dag:
    wait = SinkCursorSensor(
        task_id="wait_for_sinks",
        landing=PATHS.landing,
        consumers=CONSUMERS,
        timeout=SENSOR_TIMEOUT_S,
        **notifiers.sensor_callbacks(ALERTS, PATHS.landing, CONSUMERS),
    )
    # Neither the sensor nor start_run marks the run failed: before start_run succeeds the
    # run's record may be a past run's (a refused re-run leaves it as it was).
    start = StartRunOperator(task_id="start_run", run_id_value=RUN_ID, warehouse=PATHS.warehouse)
    compact = spark_job("compact", "compact")
    reconcile = spark_job("reconcile", "reconcile")
    backfill = [
        spark_job(f"backfill_{target}", "backfill", target=target)
        for target in step_args.BACKFILL_TARGETS
    ]
    verify = spark_job("verify", "verify", **notifiers.run_callbacks(ALERTS, RUN_ID))
    quality = QualityCheckpointOperator(
        task_id="quality",
        gx_root="{{ var.value.auditsync_gx_root }}",
        run_name=RUN_ID,
        run={"landing": PATHS.landing, "warehouse": PATHS.warehouse, "run_id": RUN_ID},
        connect_session=connect_session.TEMPLATE,
        **failed_marks_run(),
    )
    publish = PublishOperator(
        task_id="publish",
        run_id_value=RUN_ID,
        warehouse=PATHS.warehouse,
        outlets=[AUDIT_LOG, SEARCH_INDEX, RECONCILIATION, QUALITY_REPORT, WAREHOUSE_TABLES],
        **failed_marks_run(),
    )
    finish = FinishRunOperator(
        task_id="finish_run",
        run_id_value=RUN_ID,
        landing=PATHS.landing,
        warehouse=PATHS.warehouse,
        keep=KEEP_RUNS,
        connect_session=connect_session.TEMPLATE,
    )

    wait >> start >> compact >> reconcile >> backfill >> verify >> quality >> publish
    publish >> finish.as_teardown(setups=start)
