"""The DAG's ``start_run`` on a backfilled past interval, as Airflow's task runner calls
``execute`` (the ``auditsync_pg`` connection from the environment, as Airflow's secrets
backend reads it): a run that later runs built on is refused, its record left as it was; the
newest run, and a run id no run used, start."""

from __future__ import annotations

import psycopg
import pytest
from airflow.sdk.exceptions import AirflowFailException

from auditsync_plugin.operators.pipeline import StartRunOperator
from spark_jobs.warehouse.layout import Layout
from watch_service.store import runs

from ..support import unique

pytestmark = [pytest.mark.airflow, pytest.mark.pg]


def test_a_backfilled_past_run_is_refused_and_left_as_it_was(pg_url, monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_AUDITSYNC_PG", pg_url)
    work = str(tmp_path / "warehouse")
    catalog = Layout("", work, "").catalog
    old, new = unique("audit_sync_old"), unique("audit_sync_new")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for batch, run_id in enumerate((old, new), 1):
            runs.start_run(conn, run_id)
            runs.commit_reconcile(conn, catalog, run_id, (batch, batch), False, [], [])
            runs.finish_run(conn, run_id, True, 3, 0)

    def start(run_id: str) -> str:
        op = StartRunOperator(task_id="start_run", run_id_value=run_id, warehouse=work)
        return op.execute({})

    with pytest.raises(AirflowFailException) as refused:
        start(old)
    assert str(refused.value) == runs.rerun_refusal(old, [new])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert runs.get_run(conn, old)[:3] == ("passed", 3, 0)  # not reset
    assert start(new) == new  # the newest: re-run
    fresh = unique("audit_sync_gap")
    assert start(fresh) == fresh  # an interval no run covered
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert runs.get_run(conn, new)[0] == runs.get_run(conn, fresh)[0] == "running"
