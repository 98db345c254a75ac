"""The cursor flusher's writes (``store.sessions.save_cursors``): a round that only saves cursors
leaves the sessions' ``last_active_at`` alone and is written by PostgreSQL as heap-only
updates (no new index entry); a lease renewal marks the sessions active. Counted in
``pg_stat_xact_user_tables`` inside the writes' own transaction, so nothing else running on the
cluster is counted, on a database of its own (its pages as migration 039 leaves them).
"""

from __future__ import annotations

import psycopg
import pytest

from watch_service.store import sessions

from ..restore import RestorableDatabase
from ..support import unique

pytestmark = [pytest.mark.pg]

LEASE_S = 30.0


@pytest.fixture
def source(pg_url, tmp_path):
    database = RestorableDatabase(pg_url, unique("saves").replace("-", "_"), tmp_path).create()
    yield database
    database.drop()


async def counts(conn) -> tuple[int, int]:
    """(rows updated, of them heap-only) in watch_sessions by this transaction so far."""
    cur = await conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
        "WHERE relname = 'watch_sessions'"
    )
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def active(conn, wids: list[str]) -> dict[str, object]:
    cur = await conn.execute(
        "SELECT wid, last_active_at FROM watch_sessions WHERE wid = ANY(%s)", (wids,)
    )
    return dict(await cur.fetchall())


async def test_cursor_saves_are_heap_only_and_a_renewal_marks_the_sessions_active(source):
    topic = unique("st")
    wids = [unique("w") for _ in range(3)]
    async with await psycopg.AsyncConnection.connect(source.url, autocommit=True) as db:
        for wid in wids:
            await sessions.create(db, wid, {"topics": {topic: {}}}, {topic: 0}, None, None)
        gens = {wid: await sessions.open_stream(db, wid, {topic: 0}, LEASE_S) for wid in wids}
        opened = await active(db, wids)
        await db.execute("SELECT pg_sleep(0.01)")  # now() of later transactions is later

    async with await psycopg.AsyncConnection.connect(source.url) as db:
        for n in range(1, 4):  # three flusher rounds of cursors only, in one transaction
            saved = [(wid, gens[wid], {topic: 10 * n}) for wid in wids]
            assert await sessions.save_cursors(db, saved, LEASE_S, renew=False) == {
                (wid, gens[wid]) for wid in wids
            }
        assert await counts(db) == (9, 9)
        assert await active(db, wids) == opened
        await db.commit()

        saved = [(wid, gens[wid], {topic: 40}) for wid in wids]
        assert await sessions.save_cursors(db, saved, LEASE_S, renew=True) == {
            (wid, gens[wid]) for wid in wids
        }
        renewed = await active(db, wids)
        assert all(renewed[wid] > opened[wid] for wid in wids)
        await db.commit()
        cur = await db.execute(
            "SELECT wid, cursors FROM watch_sessions WHERE wid = ANY(%s)", (wids,)
        )
        assert dict(await cur.fetchall()) == {wid: {topic: 40} for wid in wids}

    # A stream taken over (a newer generation) is not written by the older one's save.
    async with await psycopg.AsyncConnection.connect(source.url, autocommit=True) as db:
        newer = await sessions.open_stream(db, wids[0], {topic: 5}, LEASE_S)
        stale = [(wids[0], gens[wids[0]], {topic: 99})]
        assert await sessions.save_cursors(db, stale, LEASE_S, renew=False) == set()
        cur = await db.execute(
            "SELECT stream_gen, cursors FROM watch_sessions WHERE wid = %s", (wids[0],)
        )
        assert await cur.fetchone() == (newer, {topic: 5})
