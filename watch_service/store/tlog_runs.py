"""A run's signed audit log in ``pipeline_runs`` (``checkpoints``, ``log_status``).

As in ``store.runs``: functions take a DB-API connection (psycopg 3, or psycopg2 as Airflow's
``PostgresHook.get_conn()`` gives) and never commit."""

from __future__ import annotations

import json
from typing import Any

LAST_CHECKPOINTS = """
SELECT checkpoints FROM pipeline_runs
 WHERE warehouse IS NOT DISTINCT FROM %(warehouse)s AND run_id <> %(run_id)s
   AND checkpoints <> '{}'::jsonb
 ORDER BY started_at DESC LIMIT 1
"""
RECORD = """
UPDATE pipeline_runs SET checkpoints = %(checkpoints)s::jsonb, log_status = %(status)s,
       updated_at = now()
 WHERE run_id = %(run_id)s
"""
RUN_LOG = "SELECT log_status, checkpoints FROM pipeline_runs WHERE run_id = %(run_id)s"


def last_checkpoints(conn: Any, warehouse: str | None, run_id: str) -> dict[str, dict[str, Any]]:
    """The checkpoints the latest other run of ``warehouse`` recorded ({} when none)."""
    cur = conn.cursor()
    cur.execute(LAST_CHECKPOINTS, {"warehouse": warehouse, "run_id": run_id})
    row = cur.fetchone()
    return {} if row is None else _json(row[0])


def record(conn: Any, run_id: str, status: str, checkpoints: dict[str, dict[str, Any]]) -> None:
    conn.cursor().execute(
        RECORD, {"run_id": run_id, "status": status, "checkpoints": json.dumps(checkpoints)}
    )


def run_log(conn: Any, run_id: str) -> tuple[str | None, dict[str, dict[str, Any]]] | None:
    """(log_status, checkpoints) of a run, or None when unknown."""
    cur = conn.cursor()
    cur.execute(RUN_LOG, {"run_id": run_id})
    row = cur.fetchone()
    return None if row is None else (row[0], _json(row[1]))


def _json(value: Any) -> dict[str, dict[str, Any]]:
    return value if isinstance(value, dict) else json.loads(value or "{}")
