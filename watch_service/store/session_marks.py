"""The watch sessions' cursors the pipeline saw at the source (migration 038): all their SQL.

``session_marks`` lives in the pipeline's database; ``watch_sessions``, ``topics`` and
``records`` in the source's. :func:`marks` reads the first, :func:`sessions_now` the second
(given the marks, so the record each mark points at is hashed in the same statement), and
:func:`replace` writes the run's view back in its commit transaction. The rules that compare
them are pure (``spark_jobs.steps.reconcile.session_cursors``).

Every read costs what the sessions and their watched topics do (one row per session and topic,
one primary-key lookup of ``records`` per row), never what the topics' history does.
Synchronous DB-API connections, as ``store.runs``; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from watch_service.protocol import hashes


class Mark(NamedTuple):
    """A session's cursor for one topic, as the pipeline saw it."""

    wid: str
    topic: str
    cursor: int
    stream_gen: int
    payload_hash: str | None  # of the record at ``cursor`` then; None: no record there


class Seen(NamedTuple):
    """A session's cursor for one topic at the source now."""

    wid: str
    topic: str
    cursor: int
    stream_gen: int
    payload_hash: str | None  # of the record at ``cursor`` now
    head_seq: int | None  # the topic's head now (None: the topic is gone)
    at_mark: str | None  # the payload hash now of the record at the mark's cursor


_HASH = hashes.sql_payload_hash("r.data::text")
MARKS = """SELECT wid, topic, cursor, stream_gen, payload_hash FROM session_marks
            WHERE warehouse = %(warehouse)s"""
# Every session's cursor per watched topic of ``topics``, with the hash of the record at it
# and of the record at the pipeline's mark (the marks passed as three arrays).
SESSIONS_NOW = f"""
SELECT s.wid, c.topic, c.seq, s.stream_gen,
       (SELECT {_HASH} FROM records r WHERE r.topic = c.topic AND r.seq = c.seq),
       t.head_seq,
       (SELECT {_HASH} FROM records r WHERE r.topic = c.topic AND r.seq = m.seq)
  FROM watch_sessions s
 CROSS JOIN LATERAL (SELECT key AS topic, value::bigint AS seq
                       FROM jsonb_each_text(s.cursors)) c
  LEFT JOIN topics t ON t.name = c.topic
  LEFT JOIN unnest(%(wids)s::text[], %(mark_topics)s::text[], %(seqs)s::bigint[])
            AS m(wid, topic, seq) ON m.wid = s.wid AND m.topic = c.topic
 WHERE c.topic = ANY(%(topics)s)
 ORDER BY s.wid, c.topic
"""
FORGET = "DELETE FROM session_marks WHERE warehouse = %s"
INSERT = """INSERT INTO session_marks
            (warehouse, wid, topic, cursor, stream_gen, payload_hash, run_id)
            VALUES (%s, %s, %s, %s, %s, %s, %s)"""


def _rows(conn: Any, sql: str, params: Any) -> list[tuple]:
    cur = conn.cursor()
    cur.execute(sql, params)
    return [tuple(r) for r in cur.fetchall()]


def marks(conn: Any, warehouse: str) -> list[Mark]:
    """The warehouse's marks (pipeline database)."""
    return [Mark(*r) for r in _rows(conn, MARKS, {"warehouse": warehouse})]


def sessions_now(source: Any, topics: Iterable[str], held: Iterable[Mark]) -> list[Seen]:
    """Every watch session's cursor for each of ``topics`` it watches, now (source), with the
    hash now of the record at each of ``held``'s cursors."""
    held = list(held)
    params = {
        "topics": sorted(set(topics)),
        "wids": [m.wid for m in held],
        "mark_topics": [m.topic for m in held],
        "seqs": [m.cursor for m in held],
    }
    return [Seen(*r) for r in _rows(source, SESSIONS_NOW, params)]


def replace(conn: Any, warehouse: str, run_id: str, seen: Iterable[Seen]) -> None:
    """The warehouse's marks become ``seen`` (sessions gone from the source lose theirs).
    Call inside the run's commit transaction."""
    cur = conn.cursor()
    cur.execute(FORGET, (warehouse,))
    rows = [(warehouse, *s[:5], run_id) for s in seen]
    if rows:
        cur.executemany(INSERT, rows)
