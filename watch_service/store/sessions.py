"""Watch sessions in PostgreSQL: definition, server-side cursors, creating key, stream lease.

Cursor writes are write-behind (batched by the caller), so a crash can re-deliver but never
skip. A stream holds a lease it renews; the idle GC never takes a session whose lease is live.
Each stream opens with the session's next ``stream_gen`` (its fence): every later write of that
stream matches only while no newer stream took the session over.

A takeover first asks the stream it replaces, wherever it runs, to store its cursors and
release the lease (:func:`ask_release`: a ``w <wid>`` notice on the service's NOTIFY channel,
answered by :func:`release` on ``RELEASE_CHANNEL``), so a client's own crash re-delivers only
what was written to its socket and never processed, not everything since the last batched
write. A holder that does not answer in time is fenced off as before.
"""

from __future__ import annotations

import contextlib
import dataclasses

import orjson
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from watch_service.store.retention import CHANNEL

_CAP_LOCK = 0x77736B  # "wsk": the advisory-lock class of the per-key session cap
TAKEOVER = "w"  # the kind of the notice asking a session's stream to release it: ``w <wid>``
RELEASE_CHANNEL = "auditsync_release"  # where a released session's wid is announced


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


async def open_stream(
    conn: AsyncConnection, wid: str, cursors: dict[str, int], lease_s: float
) -> int | None:
    """Take the session over for a new stream: store its starting ``cursors`` (a rewind takes
    effect at once), lease it, and return the stream's generation (None: the session is gone).
    Any older stream's writes are fenced off from here on."""
    cur = await conn.execute(
        "UPDATE watch_sessions SET cursors = %s, stream_gen = stream_gen + 1, "
        "last_active_at = now(), stream_lease_until = now() + make_interval(secs => %s) "
        "WHERE wid = %s RETURNING stream_gen",
        (Jsonb(cursors), lease_s, wid),
    )
    row = await cur.fetchone()
    return None if row is None else int(row[0])


# A cursor write leaves ``last_active_at`` (indexed, for the GC) alone and touches no other
# indexed column, so PostgreSQL writes it as a heap-only tuple: no new entry in the table's three
# indexes (migration 039 leaves room on each page for the new version). The lease renewal, every
# third of the lease, marks the session active as well.
_SAVE = """UPDATE watch_sessions AS s
              SET cursors = u.cursors::jsonb,{active}
                  stream_lease_until = now() + make_interval(secs => %s)
             FROM unnest(%b::text[], %b::bigint[], %b::text[]) AS u(wid, gen, cursors)
            WHERE s.wid = u.wid AND s.stream_gen = u.gen
        RETURNING s.wid, s.stream_gen"""
_SAVE_CURSORS = _SAVE.format(active="")
_SAVE_AND_RENEW = _SAVE.format(active=" last_active_at = now(),")


async def save_cursors(
    conn: AsyncConnection,
    updates: list[tuple[str, int, dict[str, int]]],
    lease_s: float,
    renew: bool = True,
) -> set[tuple[str, int]]:
    """Persist cursor maps of open streams, as (wid, generation, cursors), and extend their
    leases in one round trip; with ``renew`` also mark the sessions active (``gc`` spares a
    session by its lease while a stream holds it, and by ``last_active_at`` for ``session_ttl``
    after its lease ran out, as after a crash). Returns the (wid, generation) pairs that were
    written: a stream missing from it was taken over (or its session is gone) and must end."""
    if not updates:
        return set()
    cur = await conn.execute(
        _SAVE_AND_RENEW if renew else _SAVE_CURSORS,
        (
            lease_s,
            [w for w, _, _ in updates],
            [g for _, g, _ in updates],
            [orjson.dumps(c).decode() for _, _, c in updates],
        ),
    )
    return {(w, int(g)) for w, g in await cur.fetchall()}


async def close_streams(
    conn: AsyncConnection, ended: list[tuple[str, int, dict[str, int]]]
) -> None:
    """The last write of ended streams, as (wid, generation, cursors): their cursors, and their
    leases released, in one round trip. A stream taken over by a newer one writes nothing: the
    session's cursors and lease are the newer stream's."""
    if not ended:
        return
    await conn.execute(
        """UPDATE watch_sessions AS s
              SET cursors = u.cursors::jsonb, last_active_at = now(), stream_lease_until = NULL
             FROM unnest(%b::text[], %b::bigint[], %b::text[]) AS u(wid, gen, cursors)
            WHERE s.wid = u.wid AND s.stream_gen = u.gen""",
        (
            [w for w, _, _ in ended],
            [g for _, g, _ in ended],
            [orjson.dumps(c).decode() for _, _, c in ended],
        ),
    )


async def ask_release(conn: AsyncConnection, wid: str, timeout: float) -> bool:
    """When a stream holds a live lease on ``wid``, ask it (wherever it runs) to store its
    cursors and release the session, and wait up to ``timeout`` seconds for that; True once
    no live lease is held. ``conn`` must be in autocommit mode (LISTEN takes effect at once)."""
    await conn.execute(f"LISTEN {RELEASE_CHANNEL}")
    try:
        # Listening before looking: a release from now on is heard, one before it is seen.
        cur = await conn.execute(
            "SELECT stream_lease_until > now() FROM watch_sessions WHERE wid = %s", (wid,)
        )
        row = await cur.fetchone()
        if row is None or not row[0]:
            return True
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{TAKEOVER} {wid}"))
        # Closed on leaving, not when collected: the generator holds the connection's lock
        # until it is closed (psycopg #1310), and the UNLISTEN below needs that lock.
        async with contextlib.aclosing(conn.notifies(timeout=timeout)) as notes:
            async for note in notes:
                if note.payload == wid:
                    return True
        return False
    finally:
        await conn.execute(f"UNLISTEN {RELEASE_CHANNEL}")
        async for _ in conn.notifies(timeout=0):  # what came before the UNLISTEN: the pooled
            pass  # connection's next ask_release must not take it for its own answer


async def release(conn: AsyncConnection, wid: str, gen: int, cursors: dict[str, int]) -> bool:
    """The answer to :func:`ask_release` from the stream of generation ``gen``, ended: its
    cursors stored, its lease released and the release announced, in one statement (the
    announcement is delivered at its commit). False when a newer stream holds the session."""
    cur = await conn.execute(
        """WITH done AS (
               UPDATE watch_sessions
                  SET cursors = %s, last_active_at = now(), stream_lease_until = NULL
                WHERE wid = %s AND stream_gen = %s
            RETURNING wid)
           SELECT pg_notify(%s, wid) FROM done""",
        (Jsonb(cursors), wid, gen, RELEASE_CHANNEL),
    )
    return await cur.fetchone() is not None
