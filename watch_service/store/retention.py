"""Retention: what a topic's ``max_records`` cap and ``ttl_ms`` no longer keep leaves the log,
and the same transaction writes its ``gaps`` row (invariant L2).

A pass costs what is due, not what is retained: one set-based read (``DUE``) names the topics
with something to trim (cap: more than ``max_records`` retained; ttl: the oldest retained
record, found by the records' primary key at ``earliest_seq``, older than ``ttl_ms``), and only
those are locked (``FOR UPDATE`` on the topic row, the lock appends take) and trimmed, each in
its own transaction. With nothing due a pass is that one read.

``run_retention`` is one pass (``auditsync retention run``, the retention DAG); the service's
workers run passes through ``RetentionLeader``: only the worker holding the service-wide
advisory lock ``LEADER_LOCK`` runs them, on a connection of its own, so a service runs one pass
per interval whatever its number of workers and replicas.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from watch_service.protocol.tombstones import Tombstone

log = logging.getLogger("auditsync.retention")
CHANNEL = "auditsync"  # the NOTIFY channel of appends, trims and deletions (``store.topics``)
# pg_advisory_lock key of the retention leader: int8 of the first 8 bytes of
# sha256("auditsync.retention"), a constant so every worker and replica agrees on it.
LEADER_LOCK = 0x2FB7966F99D40E31
OnGap = Callable[[str, Tombstone], None]

DUE = """
SELECT t.name FROM topics t
 WHERE t.deleted_at IS NULL
   AND ((t.max_records IS NOT NULL AND t.head_seq - t.earliest_seq + 1 > t.max_records)
     OR (t.ttl_ms IS NOT NULL AND t.earliest_seq <= t.head_seq AND EXISTS (
           SELECT 1 FROM records r
            WHERE r.topic = t.name AND r.seq = t.earliest_seq AND r.ts < %(now_ms)s - t.ttl_ms)))
 ORDER BY t.name
"""


async def run_retention(
    pool: AsyncConnectionPool, on_gap: OnGap | None = None
) -> list[tuple[str, Tombstone]]:
    """One retention pass over every topic with something due; returns the gaps written."""
    async with pool.connection() as conn:
        return await retention_pass(conn, on_gap)


async def retention_pass(
    conn: AsyncConnection, on_gap: OnGap | None = None, now_ms: int | None = None
) -> list[tuple[str, Tombstone]]:
    """One pass on ``conn`` (autocommit): the ``DUE`` read, then a trim of each due topic."""
    now = current_ms() if now_ms is None else now_ms
    cur = await conn.execute(DUE, {"now_ms": now})
    written = []
    for (name,) in await cur.fetchall():
        for gap in await trim(conn, name, now):
            written.append((name, gap))
            if on_gap is not None:
                on_gap(name, gap)
            log.info(
                "retention: %s trimmed [%d, %d] (%s)", name, gap.gap_from, gap.gap_to, gap.reason
            )
    return written


class RetentionLeader:
    """One worker's retention runner. ``run_pass`` runs a pass only while this worker holds
    ``LEADER_LOCK`` (a session-level advisory lock on its own connection, outside the pool);
    otherwise it tries to take it, one statement, and returns None. The lock goes with the
    connection: a leader that stops or dies frees it for the next worker's try."""

    def __init__(self, db_url: str, connect_kwargs: dict | None = None) -> None:
        self.db_url, self.kwargs = db_url, {**(connect_kwargs or {}), "autocommit": True}
        self.conn: AsyncConnection | None = None
        self.leading = False

    async def run_pass(self, on_gap: OnGap | None = None) -> list[tuple[str, Tombstone]] | None:
        try:
            if self.conn is None or self.conn.closed:
                self.leading = False
                self.conn = await AsyncConnection.connect(self.db_url, **self.kwargs)
            if not self.leading:
                cur = await self.conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK,))
                row = await cur.fetchone()
                self.leading = bool(row and row[0])
                if not self.leading:
                    return None
                log.info("retention: this worker runs the service's retention passes")
            return await retention_pass(self.conn, on_gap)
        except psycopg.OperationalError:
            await self.close()  # the lock went with the connection, if it was held
            raise

    async def close(self) -> None:
        self.leading = False
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


async def trim(conn: AsyncConnection, name: str, now_ms: int | None = None) -> list[Tombstone]:
    """Apply a topic's retention now; returns the gaps written."""
    async with conn.transaction():
        return await trim_locked(conn, name, current_ms() if now_ms is None else now_ms, lock=True)


def current_ms() -> int:
    return time.time_ns() // 1_000_000


async def trim_locked(
    conn: AsyncConnection, name: str, now_ms: int, lock: bool = False
) -> list[Tombstone]:
    """Inside a transaction: remove what retention no longer keeps, writing its gaps rows."""
    cur = await conn.execute(
        "SELECT head_seq, earliest_seq, max_records, ttl_ms FROM topics "
        "WHERE name = %s AND deleted_at IS NULL" + (" FOR UPDATE" if lock else ""),
        (name,),
    )
    row = await cur.fetchone()
    if row is None:
        return []
    head, earliest, max_records, ttl_ms = row
    ttl_until = earliest  # first seq kept by ttl
    if ttl_ms is not None and earliest <= head:
        cur = await conn.execute(
            "SELECT seq FROM records WHERE topic = %s AND seq >= %s AND ts >= %s ORDER BY seq LIMIT 1",  # noqa: E501
            (name, earliest, now_ms - ttl_ms),
        )
        found = await cur.fetchone()
        ttl_until = found[0] if found else head + 1
    cap_until = earliest
    if max_records is not None:
        cap_until = max(earliest, head - max_records + 1)
    new_earliest = max(ttl_until, cap_until)
    if new_earliest <= earliest:
        return []
    written = []
    if ttl_until > earliest:
        written.append(await record_gap(conn, name, earliest, ttl_until - 1, "ttl"))
    if cap_until > max(earliest, ttl_until):
        written.append(await record_gap(conn, name, max(earliest, ttl_until), cap_until - 1, "cap"))
    await conn.execute("DELETE FROM records WHERE topic = %s AND seq < %s", (name, new_earliest))
    await conn.execute("UPDATE topics SET earliest_seq = %s WHERE name = %s", (new_earliest, name))
    # Tailers that take appends without reading (``engine.tailer.Tailer.offer``) learn here
    # that the retained start moved.
    await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"t {new_earliest} {name}"))
    return written


async def record_gap(
    conn: AsyncConnection, name: str, gap_from: int, gap_to: int, reason: str
) -> Tombstone:
    """Write a gaps row, extending the previous row when it is contiguous with the same reason."""
    cur = await conn.execute(
        "UPDATE gaps SET gap_to = %s WHERE topic = %s AND gap_to = %s AND reason = %s RETURNING gap_from",  # noqa: E501
        (gap_to, name, gap_from - 1, reason),
    )
    if await cur.fetchone() is None:
        await conn.execute(
            "INSERT INTO gaps (topic, gap_from, gap_to, reason) VALUES (%s, %s, %s, %s)",
            (name, gap_from, gap_to, reason),
        )
    return Tombstone(reason, gap_from, gap_to)
