"""ops_probe: a small DAG wired like audit_sync (its retry arguments and policy, its sink-sensor
alert, its deadline alert) for test_operations.py, which runs it under a real scheduler and API
server on a non-default port. Parse-time settings come from OPS_* variables the test sets."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from auditsync_plugin import deadlines
from auditsync_plugin.notifications import notifiers
from auditsync_plugin.retries import RETRY_ARGS
from auditsync_plugin.sensors.sink_cursors import SinkCursorSensor

ALERTS = notifiers.AlertSettings.from_env(os.environ)
CLOSED_PORT = os.environ.get("OPS_CLOSED_PORT", "1")
RELEASE = Path(os.environ.get("OPS_RELEASE_FILE", "/nonexistent/release"))
FAST_RETRIES = {
    **RETRY_ARGS,
    "retry_delay": timedelta(seconds=1),
    "max_retry_delay": timedelta(seconds=2),
}


def execution_api() -> str:
    from airflow.sdk.configuration import conf

    return conf.get("core", "execution_api_server_url")


def fault_on_first_try(ti) -> int:
    """A refused PostgreSQL connection on the first try (a fault: retried), then success."""
    if ti.try_number == 1:
        import psycopg

        psycopg.connect(f"postgresql://ops@127.0.0.1:{CLOSED_PORT}/db", connect_timeout=2)
    return ti.try_number


def verdict() -> None:
    raise AirflowFailException("verify: 1 of 1 defects remain after backfill")


def bug() -> None:
    raise KeyError("a bug, not a fault")


def hold() -> None:
    """Keep the run open until the test has seen the deadline alert (it writes RELEASE)."""
    limit = time.monotonic() + 120
    while not RELEASE.exists():
        if time.monotonic() > limit:
            raise AirflowFailException(f"{RELEASE} never appeared")
        time.sleep(0.2)


with DAG(
    dag_id="ops_probe",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    is_paused_upon_creation=False,
    default_args=FAST_RETRIES,
    deadline=deadlines.deadline_alert(
        timedelta(seconds=float(os.environ.get("OPS_DEADLINE_S", "3"))), ALERTS.as_kwargs()
    ),
) as dag:
    PythonOperator(task_id="execution_api", python_callable=execution_api)
    PythonOperator(task_id="fault_then_ok", python_callable=fault_on_first_try)
    PythonOperator(task_id="verdict", python_callable=verdict)
    PythonOperator(task_id="bug", python_callable=bug)
    PythonOperator(task_id="hold", python_callable=hold, retries=0)
    SinkCursorSensor(
        task_id="lagging_sink",
        landing=os.environ.get("OPS_LANDING", "/nonexistent"),
        consumers="lagger",
        timeout=1,
        poll_s=0.2,
        deferrable=False,
        mode="poke",
        **notifiers.sensor_callbacks(ALERTS, os.environ.get("OPS_LANDING", ""), "lagger"),
    )
