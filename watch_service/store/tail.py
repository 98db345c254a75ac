"""Following a topic's tail: the shared tailer's reads (deleted topics included, with WAL
positions), forcing and reading the WAL flush position for ``consistency: strong``, the safety
poll's head check, and the server facts the watch surfaces depend on."""

from __future__ import annotations

import dataclasses

from psycopg import AsyncConnection

from watch_service.protocol.records import Record

_READ_TAIL = """
SELECT t.head_seq, t.earliest_seq, t.deleted_at IS NOT NULL,
       pg_current_wal_insert_lsn() - '0/0'::pg_lsn, pg_current_wal_flush_lsn() - '0/0'::pg_lsn,
       r.seq, r.ts, r.tag, r.node, r.meta::text, r.data::text
  FROM topics t
  LEFT JOIN LATERAL (
        SELECT seq, ts, tag, node, meta, data FROM records
         WHERE topic = t.name AND seq > %(after)s
         ORDER BY seq LIMIT %(limit)s) r ON true
 WHERE t.name = %(topic)s
 ORDER BY r.seq
"""


@dataclasses.dataclass(frozen=True)
class TailRead:
    head_seq: int
    earliest_seq: int
    deleted: bool
    insert_lsn: int  # WAL insert position after the read: every visible commit is before it
    flush_lsn: int
    records: list[Record]


async def read_tail(conn: AsyncConnection, name: str, after: int, limit: int) -> TailRead | None:
    """Like ``read`` but for the shared tailer: includes deleted topics and WAL positions."""
    cur = await conn.execute(_READ_TAIL, {"topic": name, "after": after, "limit": limit})
    rows = await cur.fetchall()
    if not rows:
        return None
    head, earliest, deleted, insert_lsn, flush_lsn = rows[0][:5]
    records = [Record(*r[5:]) for r in rows if r[5] is not None]
    return TailRead(head, earliest, deleted, int(insert_lsn), int(flush_lsn), records)


async def force_flush(conn: AsyncConnection) -> int:
    """Make every commit so far durable (a synchronous commit flushes the WAL before it);
    returns the flush LSN after."""
    async with conn.transaction():
        await conn.execute("SET LOCAL synchronous_commit = on")
        # A commit flushes only if its transaction wrote WAL: a transactional logical message
        # is the smallest such write (wal_level=logical is required of the server anyway).
        await conn.execute("SELECT pg_logical_emit_message(true, 'auditsync.flush', '')")
    return await flush_lsn(conn)


async def flush_lsn(conn: AsyncConnection) -> int:
    cur = await conn.execute("SELECT pg_current_wal_flush_lsn() - '0/0'::pg_lsn")
    row = await cur.fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    return int(row[0])


async def topic_heads(conn: AsyncConnection, names: list[str]) -> dict[str, int]:
    """The current ``head_seq`` of each named topic that exists."""
    cur = await conn.execute("SELECT name, head_seq FROM topics WHERE name = ANY(%s)", (names,))
    return dict(await cur.fetchall())
