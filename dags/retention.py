"""retention: apply every topic's retention (``max_records`` cap, ``ttl_ms``) on a schedule."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

SCHEDULE = os.environ.get("AUDITSYNC_RETENTION_SCHEDULE", "*/5 * * * *")
AUDITSYNC = os.environ.get("AUDITSYNC_CLI", str(Path(sys.executable).with_name("auditsync")))

with DAG(
    dag_id="retention",
    description="auditsync retention run",
    doc_md=__doc__
    + """

Runs `auditsync retention run` against the `auditsync_pg` connection. Each trim writes its
`gaps` row in the same transaction (invariant L2), so the audit_sync reconciliation sees the
loss as recorded (tombstoned / trimmed after delivery), never as a silent gap. Idempotent:
a re-run trims nothing new. Schedule: `AUDITSYNC_RETENTION_SCHEDULE` (default every 5 minutes).
""",
    schedule=SCHEDULE,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={
        "retries": 1,
        "retry_delay": timedelta(minutes=1),
        "execution_timeout": timedelta(minutes=10),
    },
    tags=["auditsync"],
) as dag:
    BashOperator(
        task_id="retention_run",
        bash_command=f"{AUDITSYNC} retention run",
        env={"DATABASE_URL": "{{ conn.auditsync_pg.get_uri() }}"},
        append_env=True,
    )
