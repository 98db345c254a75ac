"""What the operations alerts read and write in PostgreSQL (migration 012): the once-only
ledger ``alerts_sent`` and the judged windows of a pipeline run (``reconcile_windows``), which
the alert shows beside the run's summary (``runs.run_summary``).

Like ``runs.py``, every function takes a synchronous DB-API connection and never commits.
"""

from __future__ import annotations

from typing import Any

CLAIM = """INSERT INTO alerts_sent (dag_id, run_id, kind, channel, summary)
           VALUES (%(dag_id)s, %(run_id)s, %(kind)s, %(channel)s, %(summary)s)
           ON CONFLICT (dag_id, run_id, kind, channel) DO NOTHING
           RETURNING sent_at"""
RELEASE = """DELETE FROM alerts_sent
              WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND kind = %(kind)s
                AND channel = %(channel)s"""
SENT = """SELECT run_id, kind, channel, summary FROM alerts_sent
           WHERE dag_id = %(dag_id)s ORDER BY sent_at, kind, channel"""
RUN_WINDOWS = """SELECT consumer, topic, seq_from, seq_to FROM reconcile_windows
                  WHERE run_id = %(run_id)s ORDER BY consumer, topic"""


def _execute(conn: Any, sql: str, params: dict[str, Any]) -> Any:
    cur = conn.cursor()
    cur.execute(sql, params)
    return cur


def claim(conn: Any, dag_id: str, run_id: str, kind: str, channel: str, summary: str = "") -> bool:
    """True when this caller is the first to send alert ``kind`` of the run on ``channel``."""
    key = {"dag_id": dag_id, "run_id": run_id, "kind": kind, "channel": channel}
    return _execute(conn, CLAIM, {**key, "summary": summary}).fetchone() is not None


def release(conn: Any, dag_id: str, run_id: str, kind: str, channel: str) -> None:
    """Give back a claim whose alert could not be sent, so a later attempt sends it."""
    key = {"dag_id": dag_id, "run_id": run_id, "kind": kind, "channel": channel}
    _execute(conn, RELEASE, key)


def sent(conn: Any, dag_id: str) -> list[tuple[str, str, str, str]]:
    """(run_id, kind, channel, summary) of every alert sent for ``dag_id``, oldest first."""
    return [tuple(r) for r in _execute(conn, SENT, {"dag_id": dag_id}).fetchall()]


def run_windows(conn: Any, run_id: str) -> list[tuple[str, str, int, int]]:
    """(consumer, topic, seq_from, seq_to) of the windows pipeline run ``run_id`` judged:
    seqs in (seq_from, seq_to]."""
    return [tuple(r) for r in _execute(conn, RUN_WINDOWS, {"run_id": run_id}).fetchall()]
