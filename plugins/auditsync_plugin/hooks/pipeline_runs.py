"""The pipeline's run tables in PostgreSQL, as Airflow reaches them: a ``PostgresHook`` on the
``auditsync_pg`` connection whose methods hand a psycopg connection to the store's functions.

The SQL itself lives with the rest of the pipeline's run tables (``watch_service.store.runs``),
never in an operator; this hook only decides which connection and transaction it runs in.
Importing this module imports the Postgres provider, not psycopg's pool or anything heavy.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import closing
from typing import Any

from airflow.providers.postgres.hooks.postgres import PostgresHook

from watch_service.store import runs

DEFAULT_CONN_ID = "auditsync_pg"


def database_url(pg_conn_id: str) -> str:
    """The run tables' PostgreSQL (the warehouse's catalog lives there too)."""
    from spark_jobs.common.cli import DATABASE_URL_ENV

    from_env = os.environ.get(DATABASE_URL_ENV)
    if from_env:
        return from_env
    return str(PostgresHook.get_connection(pg_conn_id).get_uri())


class PipelineRunsHook(PostgresHook):
    """``pipeline_runs`` / ``reconcile_summary`` through the ``auditsync_pg`` connection."""

    default_conn_name = DEFAULT_CONN_ID
    conn_type = "auditsync_pg"  # the provider's connection type (a `postgres` one works too)
    hook_name = "auditsync pipeline runs"

    def __init__(self, postgres_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(postgres_conn_id=postgres_conn_id, **kwargs)

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
