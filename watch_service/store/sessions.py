"""Watch sessions in PostgreSQL: definition, server-side cursors, creating key, stream lease.

Cursor writes are write-behind (batched by the caller), so a crash can re-deliver but never
skip. A stream holds a lease it renews; the idle GC never takes a session whose lease is live.
"""

from __future__ import annotations

import dataclasses

import orjson
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

_CAP_LOCK = 0x77736B  # "wsk": the advisory-lock class of the per-key session cap


@dataclasses.dataclass(frozen=True)
class SessionRow:
    wid: str
    definition: dict
    cursors: dict[str, int]
    key_hash: str | None
    key_id: str | None


@dataclasses.dataclass(frozen=True)
class TopicState:
    head_seq: int
    earliest_seq: int
    deleted: bool


async def topic_states(conn: AsyncConnection, names: list[str]) -> dict[str, TopicState]:
    cur = await conn.execute(
        "SELECT name, head_seq, earliest_seq, deleted_at IS NOT NULL FROM topics "
        "WHERE name = ANY(%s)",
        (names,),
    )
    return {r[0]: TopicState(*r[1:]) for r in await cur.fetchall()}


async def create(
    conn: AsyncConnection,
    wid: str,
    definition: dict,
    cursors: dict[str, int],
    key_hash: str | None,
    key_id: str | None,
    max_per_key: int | None = None,
) -> int | None:
    """Insert the session; ``key_hash`` None marks it a dev-mode session. With ``max_per_key``
    and a key, refuse (return the key's live session count, nothing written) once that key
    holds ``max_per_key`` sessions; None when the session was created. The count and the
    insert run under a per-key transaction lock, so concurrent POSTs cannot overshoot."""
    async with conn.transaction():
        if max_per_key is not None and key_hash is not None:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_CAP_LOCK, key_hash)
            )
            cur = await conn.execute(
                "SELECT count(*) FROM watch_sessions WHERE key_hash = %s", (key_hash,)
            )
            row = await cur.fetchone()
            held = row[0] if row else 0
            if held >= max_per_key:
                return held
        await conn.execute(
            "INSERT INTO watch_sessions (wid, definition, cursors, key_hash, key_id) "
            "VALUES (%s, %s, %s, %s, %s)",
            (wid, Jsonb(definition), Jsonb(cursors), key_hash, key_id),
        )
    return None


async def load(conn: AsyncConnection, wid: str) -> SessionRow | None:
    cur = await conn.execute(
        "SELECT wid, definition, cursors, key_hash, key_id FROM watch_sessions WHERE wid = %s",
        (wid,),
    )
    row = await cur.fetchone()
    return SessionRow(*row) if row else None


async def gc(conn: AsyncConnection, ttl_ms: int) -> int:
    """Delete sessions idle for ``ttl_ms`` with no live stream lease; returns how many."""
    cur = await conn.execute(
        "DELETE FROM watch_sessions WHERE last_active_at < now() - make_interval(secs => %s) "
        "AND (stream_lease_until IS NULL OR stream_lease_until < now())",
        (ttl_ms / 1000,),
    )
    return cur.rowcount


async def open_stream(conn: AsyncConnection, wid: str, lease_s: float) -> None:
    await conn.execute(
        "UPDATE watch_sessions SET last_active_at = now(), "
        "stream_lease_until = now() + make_interval(secs => %s) WHERE wid = %s",
        (lease_s, wid),
    )


async def save_cursors(
    conn: AsyncConnection, updates: list[tuple[str, dict[str, int]]], lease_s: float
) -> None:
    """Persist cursor maps of open streams and renew their leases, in one round trip."""
    if not updates:
        return
    await conn.execute(
        """UPDATE watch_sessions AS s
              SET cursors = u.cursors::jsonb, last_active_at = now(),
                  stream_lease_until = now() + make_interval(secs => %s)
             FROM unnest(%s::text[], %s::text[]) AS u(wid, cursors)
            WHERE s.wid = u.wid""",
        (lease_s, [w for w, _ in updates], [orjson.dumps(c).decode() for _, c in updates]),
    )


async def close_stream(conn: AsyncConnection, wid: str, cursors: dict[str, int]) -> None:
    await conn.execute(
        "UPDATE watch_sessions SET cursors = %s, last_active_at = now(), "
        "stream_lease_until = NULL WHERE wid = %s",
        (Jsonb(cursors), wid),
    )
