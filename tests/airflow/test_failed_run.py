"""A run whose step fails for good under ``airflow dags test``, then the same data interval
re-tried and passing (the run lifecycle, ``spark_jobs/lifecycle.py``).

The fault is real: the warehouse variable names a folder under a regular file, so compact
cannot create its tables (Iceberg: "Failed to create file"; no transient fault, so no retry).
``pipeline_runs`` and the Reconciliation page then say ``failed``, in ``compact``, with its
reason. The operator moves the file away and runs the interval again: the same pipeline run id
goes back to ``running`` through ``start_run``, then ``passed``, its failure forgotten.
``finish_run`` (the teardown) runs after both, and the retry's (``AUDITSYNC_KEEP_RUNS=1``)
prunes the warehouse's older runs. Shares the fault run's unit (its home, landing and Spark
Connect server; ``tests/conftest.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import psycopg
import pytest

from auditsync_plugin.ui import runs as ui_runs
from auditsync_plugin.ui.page import render_page
from spark_jobs.common.statuses import DEFECTS, REPAIRABLE
from spark_jobs.warehouse.layout import Layout
from watch_service.store import runs

from .conftest import DagTest, dags_test, pg_rows, pipeline_run_id

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.timeout(1200)]
RETRY_DATE = "2025-06-01T12:50:00+00:00"  # interval [12:30, 12:45)
RUN_SQL = """SELECT status, failed_step, failure_reason FROM pipeline_runs WHERE run_id = %s"""
PIPELINE = ("compact", "reconcile", "backfill_audit_log", "backfill_search_index", "verify")


@dataclasses.dataclass
class Attempts:
    failed: DagTest
    failed_row: tuple
    failed_page: str
    retried: DagTest
    blocked: Path
    older: list[str]  # runs of the warehouse older than the retry


def page_of(pg_url: str, run_id: str) -> tuple[list[ui_runs.TopicLine], str]:
    """The page's lines of ``run_id`` and the page itself, as the plugin reads them."""
    rows, _ = ui_runs.fetch({"conninfo": pg_url})
    lines = ui_runs.pivot(rows, REPAIRABLE, DEFECTS)
    return [x for x in lines if x.run_id == run_id], render_page(lines, docs_available=False)


@pytest.fixture(scope="module")
def attempts(airflow_home, landing, pg_url, tmp_path_factory) -> Attempts:
    root = tmp_path_factory.mktemp("failed-run")
    blocked = root / "blocked"
    blocked.write_text("a file where the warehouse's folder should be\n")
    run_id = pipeline_run_id("20250601T123000Z", "20250601T124500Z")
    warehouse = blocked / "warehouse"
    failed = dags_test(airflow_home, RETRY_DATE, run_id, warehouse=warehouse)
    [row] = pg_rows(pg_url, RUN_SQL, run_id)
    _, page = page_of(pg_url, run_id)
    blocked.unlink()  # the operator's fix, then the same interval again
    # Two older runs of this warehouse that the retry's finish_run prunes (keep 1).
    catalog = Layout("", str(warehouse), "").catalog
    old = [f"{run_id}-older-{i}" for i in (1, 2)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for older in old:
            runs.start_run(conn, older, catalog)
            runs.finish_run(conn, older, True, 0, 0)
        conn.execute(
            "UPDATE pipeline_runs SET started_at = started_at - interval '1 day' "
            "WHERE run_id = ANY(%s)",
            (old,),
        )
    retried = dags_test(
        airflow_home,
        RETRY_DATE,
        run_id,
        warehouse=warehouse,
        extra_env={"AUDITSYNC_KEEP_RUNS": "1"},
    )
    return Attempts(failed, row, page, retried, blocked, old)


def test_compact_fails_for_good_and_the_run_says_where_and_why(attempts):
    failed = attempts.failed
    assert failed.returncode != 0
    assert failed.states["compact"] == "failed"  # no retry: not a transient fault
    assert all(failed.states[t] == "upstream_failed" for t in PIPELINE[1:])
    assert failed.states["start_run"] == "success"
    assert failed.states["finish_run"] == "success"  # the teardown runs whatever the outcome
    status, step, reason = attempts.failed_row
    assert (status, step) == ("failed", "compact")
    assert "\n" not in reason and 0 < len(reason) <= 300
    assert str(attempts.blocked) in reason, reason
    assert reason in failed.output  # the task log's own error


def test_the_page_shows_the_failed_run_with_its_step_and_reason(attempts):
    from html import escape

    _, step, reason = attempts.failed_row
    expected = (
        f'<div class="failure bad">failed in <b class="failed-step">{step}</b>: '
        f'<span class="failure-reason">{escape(reason)}</span></div>'
    )
    assert expected in attempts.failed_page


def test_the_interval_retried_passes_and_forgets_the_failure(attempts, pg_url):
    retried = attempts.retried
    assert retried.returncode == 0, retried.output[-5000:]
    assert all(retried.states[t] == "success" for t in PIPELINE)
    assert retried.states["finish_run"] == "success"
    assert pg_rows(pg_url, RUN_SQL, retried.run_id) == [("passed", None, None)]
    lines, page = page_of(pg_url, retried.run_id)
    assert lines and {(x.run_status, x.failed_step) for x in lines} == {("passed", "")}
    assert f"<td>{retried.run_id}" in page


def test_the_teardown_prunes_the_runs_beyond_keep_runs(attempts, pg_url):
    """``AUDITSYNC_KEEP_RUNS=1``: the retry's ``finish_run`` pruned the warehouse's two older
    runs, and kept the retried one."""
    assert "retention: kept the newest 1 run(s), pruned 2" in attempts.retried.output
    rows = pg_rows(
        pg_url,
        "SELECT run_id FROM pipeline_runs WHERE run_id = ANY(%s)",
        [*attempts.older, attempts.retried.run_id],
    )
    assert rows == [(attempts.retried.run_id,)]
