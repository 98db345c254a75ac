"""Retention: what a topic's ``max_records`` cap and ``ttl_ms`` no longer keep leaves the log,
and the same transaction writes its ``gaps`` row (invariant L2). ``run_retention`` is one pass
over every retained topic, as the service's loop, ``auditsync retention run`` and the
retention DAG run it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from watch_service.protocol.tombstones import Tombstone

log = logging.getLogger("auditsync.retention")
CHANNEL = "auditsync"  # the NOTIFY channel of appends, trims and deletions (``store.topics``)


async def run_retention(
    pool: AsyncConnectionPool, on_gap: Callable[[str, Tombstone], None] | None = None
) -> list[tuple[str, Tombstone]]:
    """One retention pass over every topic with a cap or a ttl; returns the gaps written."""
    written = []
    async with pool.connection() as conn:
        for name in await retained_topics(conn):
            for gap in await trim(conn, name):
                written.append((name, gap))
                if on_gap is not None:
                    on_gap(name, gap)
                log.info(
                    "retention: %s trimmed [%d, %d] (%s)",
                    name,
                    gap.gap_from,
                    gap.gap_to,
                    gap.reason,
                )
    return written


async def trim(conn: AsyncConnection, name: str, now_ms: int | None = None) -> list[Tombstone]:
    """Apply a topic's retention now; returns the gaps written."""
    async with conn.transaction():
        return await trim_locked(conn, name, current_ms() if now_ms is None else now_ms, lock=True)


async def retained_topics(conn: AsyncConnection) -> list[str]:
    cur = await conn.execute(
        "SELECT name FROM topics WHERE deleted_at IS NULL "
        "AND (max_records IS NOT NULL OR ttl_ms IS NOT NULL) ORDER BY name"
    )
    return [n for (n,) in await cur.fetchall()]


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
