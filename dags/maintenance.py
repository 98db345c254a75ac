"""maintenance: keep the warehouse's Iceberg tables small and tidy (rewrite, expire, orphans)
and the landing zone to what is not yet verified or recent (landing retention)."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from auditsync_plugin import step_args
from auditsync_plugin.operators.landing_retention import LandingRetentionOperator
from auditsync_plugin.operators.spark_step import SparkStepOperator

PROJECT = step_args.project()
# Parse-time settings come from the process environment only (see audit_sync.py).
SCHEDULE = os.environ.get("AUDITSYNC_MAINTENANCE_SCHEDULE", "@daily")
RETENTION_HOURS = os.environ.get("AUDITSYNC_SNAPSHOT_RETENTION_HOURS", "168")
TARGET_FILE_MB = os.environ.get("AUDITSYNC_TARGET_FILE_SIZE_MB", "128")
LANDING_RETENTION_HOURS = os.environ.get("AUDITSYNC_LANDING_RETENTION_HOURS", "168")
SPARK_SUBMIT = os.environ.get(
    "AUDITSYNC_SPARK_SUBMIT", str(Path(sys.executable).with_name("spark-submit"))
)

with DAG(
    dag_id="maintenance",
    description="warehouse maintenance: rewrite small files, expire snapshots, remove orphans",
    doc_md=__doc__
    + """

One Spark step, `spark_jobs/steps/maintenance/main.py`, over every table of the warehouse in the
`auditsync_warehouse` Variable (the same one `audit_sync` writes), on Spark Connect when the
`spark_connect_default` connection exists, else `spark-submit` through `spark_default`:

1. **rewrite_data_files** — a partition's small files (every pipeline run appends a few) become
   files of `AUDITSYNC_TARGET_FILE_SIZE_MB` (default 128);
2. **expire_snapshots** — snapshots older than `AUDITSYNC_SNAPSHOT_RETENTION_HOURS` (default
   168, 7 days) go, but never one a pipeline run started within that retention references
   (`pipeline_runs.snapshots`: "the audit log as run X left it" keeps working), nor the one
   holding compact's state;
3. **remove_orphan_files** — files no snapshot references (a crashed writer's), older than the
   retention and at least a day old.

Its figures (files before/after, snapshots expired, orphans removed, per table) are the task's
result.

Beside it, **landing_retention** (pure Python through `watch_service.storage`, no Spark) deletes the
landing segments (`<landing>/<consumer>/<YYYY-MM-DD>/<HH>/part-*.parquet`, in the
`auditsync_landing` Variable) that a **passed** run compacted, reconciled and verified and whose
hour ended more than `AUDITSYNC_LANDING_RETENTION_HOURS` (default 168, 7 days) ago. It never
deletes a segment not yet compacted, nor one a run that did not pass (failed, running)
compacted; `pipeline audit` reads only `deliveries` and the segments not yet compacted, so it
needs none of those deleted. It lists only the day and hour folders that may expire, so its
cost follows what expires, not the history. Root-level segments of an earlier sink expire by
their modification time. Fault decisions (`faults/`, fault injection only) are kept.

Safe to re-run; safe beside `audit_sync` runs (Iceberg's commits are compare-and-swap).
Schedule: `AUDITSYNC_MAINTENANCE_SCHEDULE` (default `@daily`).
""",
    schedule=SCHEDULE,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={
        "retries": 1,
        "retry_delay": timedelta(minutes=5),
        "execution_timeout": timedelta(hours=2),
    },
    tags=["auditsync"],
) as dag:
    SparkStepOperator(
        task_id="maintenance",
        step="maintenance",
        application=step_args.application(PROJECT, "maintenance"),
        application_args=step_args.maintenance_args(
            "{{ var.value.auditsync_warehouse }}", RETENTION_HOURS, TARGET_FILE_MB
        ),
        env_vars=step_args.STEP_ENV,
        conn_id="spark_default",
        spark_binary=SPARK_SUBMIT,
        name="maintenance",
        driver_memory="1g",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.log.level": "WARN",
        },
    )
    # Independent of the Spark step: a failed table maintenance does not hold the landing back.
    LandingRetentionOperator(
        task_id="landing_retention",
        landing="{{ var.value.auditsync_landing }}",
        warehouse="{{ var.value.auditsync_warehouse }}",
        retention_hours=LANDING_RETENTION_HOURS,
    )
