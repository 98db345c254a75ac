"""The pipeline's run tables in PostgreSQL, as Airflow reaches them: a ``PostgresHook`` on the
pipeline's connection whose methods hand a psycopg connection to the store's functions.

The pipeline's state (run tables, digests, alert ledger, the Iceberg catalog) lives where the
connection ``auditsync_pipeline`` points, apart from the source (``auditsync_pg``) so a
restore or failover of the source leaves it whole; without that connection, in the source's
database (``pipeline_conn_id``).

The SQL itself lives with the rest of the pipeline's run tables (``watch_service.store.runs``),
never in an operator; this hook only decides which connection and transaction it runs in.
Importing this module imports the Postgres provider, not psycopg's pool or anything heavy.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from contextlib import closing
from typing import Any

from airflow.providers.postgres.hooks.postgres import PostgresHook

from watch_service.store import runs

log = logging.getLogger(__name__)

DEFAULT_CONN_ID = "auditsync_pg"
PIPELINE_CONN_ID = "auditsync_pipeline"


def database_url(pg_conn_id: str) -> str:
    """The source's PostgreSQL (``AUDITSYNC_DATABASE_URL``, else the connection)."""
    from spark_jobs.common.cli import DATABASE_URL_ENV

    from_env = os.environ.get(DATABASE_URL_ENV)
    if from_env:
        return from_env
    return str(PostgresHook.get_connection(pg_conn_id).get_uri())


def pipeline_conn_id(pg_conn_id: str) -> str:
    """``auditsync_pipeline`` when that connection exists, else ``pg_conn_id`` (the source's
    database holds the pipeline's state too)."""
    from airflow.exceptions import AirflowNotFoundException

    try:
        PostgresHook.get_connection(PIPELINE_CONN_ID)
    except AirflowNotFoundException:
        return pg_conn_id
    except PermissionError as exc:
        # AirflowSecretsBackendAccessDenied: a callback's workload (the deadline alert's) is
        # refused every connection by the execution API; only those in its environment
        # (AIRFLOW_CONN_*) reach it, so a pipeline connection kept apart must be given there.
        log.warning("%s; using %s for the pipeline's state", exc, pg_conn_id)
        return pg_conn_id
    return PIPELINE_CONN_ID


def pipeline_database_url(pg_conn_id: str) -> str:
    """The pipeline's PostgreSQL: ``AUDITSYNC_PIPELINE_DATABASE_URL``, else the connection
    ``auditsync_pipeline``, else the source's (:func:`database_url`)."""
    from spark_jobs.common.cli import PIPELINE_URL_ENV

    from_env = os.environ.get(PIPELINE_URL_ENV)
    if from_env:
        return from_env
    conn_id = pipeline_conn_id(pg_conn_id)
    if conn_id == pg_conn_id:
        return database_url(pg_conn_id)
    return str(PostgresHook.get_connection(conn_id).get_uri())


class PipelineRunsHook(PostgresHook):
    """``pipeline_runs`` / ``reconcile_summary`` through the pipeline's connection
    (``pipeline_conn_id`` of the given source connection)."""

    default_conn_name = DEFAULT_CONN_ID
    conn_type = "auditsync_pg"  # the provider's connection type (a `postgres` one works too)
    hook_name = "auditsync pipeline runs"

    def __init__(self, postgres_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        self.source_conn_id = postgres_conn_id
        super().__init__(postgres_conn_id=pipeline_conn_id(postgres_conn_id), **kwargs)

    def check_apart(self) -> None:
        """Refuse to start a run in an empty pipeline database while the source's holds the
        pipeline's state (``pipeline_state.refusal``: the message names the move command)."""
        from watch_service.store import pipeline_state

        if self.postgres_conn_id == self.source_conn_id:
            return
        with (
            closing(PostgresHook(postgres_conn_id=self.source_conn_id).get_conn()) as source,
            closing(self.get_conn()) as own,
        ):
            reason = pipeline_state.refusal(pipeline_state.held(source), pipeline_state.held(own))
        if reason:
            raise pipeline_state.PipelineStateError(reason)

    def start_run(self, run_id: str, warehouse: str | None = None) -> None:
        """Mark ``run_id`` running, forgetting what an earlier attempt of it recorded."""
        from spark_jobs import lifecycle

        with closing(self.get_conn()) as conn:
            lifecycle.start(conn, run_id, warehouse)
            conn.commit()

    def mark_failed(self, run_id: str, step: str, reason: str, warehouse: str | None) -> None:
        """``step`` of ``run_id`` failed for good, for ``reason`` (one line)."""
        from spark_jobs import lifecycle

        with closing(self.get_conn()) as conn:
            lifecycle.fail(conn, run_id, step, reason, warehouse)
            conn.commit()

    def later_runs(self, warehouse: str, run_id: str) -> list[str]:
        """The warehouse's runs reconciled after ``run_id``."""
        with closing(self.get_conn()) as conn:
            return runs.later_runs(conn, warehouse, run_id)

    def run_row(self, run_id: str) -> Sequence[Any] | None:
        """(status, defects_found, defects_remaining, steps) of ``run_id``, or None."""
        with closing(self.get_conn()) as conn:
            return runs.get_run(conn, run_id)
