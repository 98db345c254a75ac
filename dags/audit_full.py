"""audit_full: re-verify the whole history on demand, independently of the incremental runs."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

# Parse-time settings from the process environment only (see watch_service/tools/airflow_env.py).
# Default: no schedule (trigger it from the UI); e.g. AUDITSYNC_AUDIT_SCHEDULE="@weekly".
SCHEDULE = os.environ.get("AUDITSYNC_AUDIT_SCHEDULE") or None
AUDITSYNC = os.environ.get("AUDITSYNC_CLI", str(Path(sys.executable).with_name("auditsync")))

with DAG(
    dag_id="audit_full",
    description="full audit: re-judge all history and compare with the incremental runs",
    doc_md=__doc__
    + """

Runs `auditsync pipeline audit` over the landing zone and warehouse the `audit_sync` DAG uses:
it compacts what is new, then re-judges every delivery against every source seq up to each
consumer's watermark, and compares the verdicts per consumer, topic and status with the sum of
the incremental runs' summaries. The task fails, listing the disagreements, when they differ.
It writes only the warehouse's `audit_detail` and `audit_summary` tables and never changes the
audit log.

Costly by design (it reads all history): no schedule unless `AUDITSYNC_AUDIT_SCHEDULE` sets one
(e.g. `@weekly`). The database URL reaches the command in its environment, not its arguments.
""",
    schedule=SCHEDULE,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0, "execution_timeout": timedelta(hours=6)},
    tags=["auditsync"],
) as dag:
    BashOperator(
        task_id="full_audit",
        bash_command=(
            f"{AUDITSYNC} pipeline audit --landing {{{{ var.value.auditsync_landing }}}}"
            f" --work {{{{ var.value.auditsync_warehouse }}}}"
            " --master '{{ conn.spark_default.host }}'"
        ),
        env={"DATABASE_URL": "{{ conn.auditsync_pg.get_uri() }}"},
        append_env=True,
    )
