"""Retention costs what it trims (issue 23, item 4): two runners on one database (what two
workers run), 10,000 retained topics with nothing due, and

- one runner leads (the service-wide advisory lock); the other only tries, one statement a
  pass, and takes over when the leader's connection goes;
- the leader's idle pass is one read: PostgreSQL counts one committed transaction per runner
  per pass (``pg_stat_database.xact_commit``; a few more are allowed for autovacuum), where a
  pass used to open a locking transaction per retained topic;
- a topic that is due is trimmed exactly: its gaps rows and tombstones, nothing else.

The database is a fresh one in the session cluster, so no other test's topics or commits count.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support import unique, wait_for
from watch_service.protocol.tombstones import Tombstone
from watch_service.store.migrate import migrate
from watch_service.store.retention import RetentionLeader

pytestmark = pytest.mark.pg

IDLE_TOPICS = 10_000
TTL = 86_400_000
PASSES = 3
OTHERS = 3
# A backend reports its commit count with its table statistics, so a transaction that reads no
# table (a try of the advisory lock) is reported by the backend's next one that does: this
# statement reads one and makes its report immediate.
FLUSH = "SELECT pg_stat_force_next_flush(), EXISTS (SELECT 1 FROM gaps)"


@pytest.fixture
def own_db(pg_cluster) -> str:
    name = unique("ret").replace("-", "_")
    admin = pg_cluster.url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = pg_cluster.url.rsplit("/", 1)[0] + "/" + name
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        # Every table the migrations filled analysed now, so autovacuum has no analyze of them
        # left to commit inside the counted passes (each new migration adds tables to it).
        conn.execute("ANALYZE")
    yield url
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def seed(url: str, now_ms: int) -> None:
    """IDLE_TOPICS retained topics with nothing due (capped at 10 with one record, or a ttl of
    a day with one fresh record), and two that are due: ``due-cap`` (5 records, cap 3) and
    ``due-ttl`` (records 1-2 older than its ttl, 3 fresh)."""
    capped = IDLE_TOPICS // 2
    with psycopg.connect(url, autocommit=True) as c:
        for table in ("topics", "records", "gaps"):  # no autovacuum commit in the counts
            c.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        c.execute(
            "INSERT INTO topics (name, head_seq, earliest_seq, last_ts, max_records, ttl_ms) "
            "SELECT 'idle-' || g, 1, 1, %(now)s, CASE WHEN g <= %(capped)s THEN 10 END, "
            "CASE WHEN g > %(capped)s THEN %(ttl)s END FROM generate_series(1, %(n)s) g",
            {"now": now_ms, "capped": capped, "ttl": TTL, "n": IDLE_TOPICS},
        )
        c.execute(
            "INSERT INTO records (topic, seq, ts, data) "
            "SELECT 'idle-' || g, 1, %s, '{}' FROM generate_series(1, %s) g",
            (now_ms, IDLE_TOPICS),
        )
        c.execute(
            "INSERT INTO topics (name, head_seq, earliest_seq, last_ts, max_records, ttl_ms) "
            "VALUES ('due-cap', 5, 1, %(now)s, 3, NULL), ('due-ttl', 3, 1, %(now)s, NULL, 60000)",
            {"now": now_ms},
        )
        c.execute(
            "INSERT INTO records (topic, seq, ts, data) SELECT 'due-cap', s, %(now)s, '{}'::json "
            "FROM generate_series(1, 5) s UNION ALL "
            "SELECT 'due-ttl', s, CASE WHEN s < 3 THEN %(old)s ELSE %(now)s END, '{}'::json "
            "FROM generate_series(1, 3) s",
            {"now": now_ms, "old": now_ms - 120_000},
        )


async def commits(conn: psycopg.AsyncConnection) -> int:
    """The database's committed transactions, with ``conn``'s own reported first (its flush
    and this read: two commits, the second counted by the next call)."""
    await conn.execute(FLUSH)
    cur = await conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def flush(*runners: RetentionLeader) -> None:
    """Each runner's backend reports its counts now (one committed statement each)."""
    for r in runners:
        assert r.conn is not None
        await r.conn.execute(FLUSH)


async def test_one_leader_idle_passes_are_one_read_and_due_topics_trim_exactly(own_db):
    seed(own_db, time.time_ns() // 1_000_000)
    a, b = RetentionLeader(own_db), RetentionLeader(own_db)
    async with await psycopg.AsyncConnection.connect(own_db, autocommit=True) as probe:
        try:
            # The first pass: a leads and trims the two due topics; b only tries.
            written = await a.run_pass()
            assert await b.run_pass() is None
            assert (a.leading, b.leading) == (True, False)
            assert written == [
                ("due-cap", Tombstone("cap", 1, 2)),
                ("due-ttl", Tombstone("ttl", 1, 2)),
            ]
            cur = await probe.execute("SELECT topic, gap_from, gap_to, reason FROM gaps")
            assert sorted(await cur.fetchall()) == [
                ("due-cap", 1, 2, "cap"),
                ("due-ttl", 1, 2, "ttl"),
            ]
            cur = await probe.execute(
                "SELECT name, earliest_seq, head_seq FROM topics WHERE name LIKE 'due-%' "
                "ORDER BY name"
            )
            assert await cur.fetchall() == [("due-cap", 3, 5), ("due-ttl", 3, 3)]
            cur = await probe.execute(
                "SELECT topic, min(seq), max(seq), count(*) FROM records "
                "WHERE topic LIKE 'due-%' GROUP BY topic ORDER BY topic"
            )
            assert await cur.fetchall() == [("due-cap", 3, 5, 3), ("due-ttl", 3, 3, 1)]

            # Idle passes: one committed read per runner per pass, whatever the topic count.
            await flush(a, b)
            before = await commits(probe)
            for _ in range(PASSES):
                assert await a.run_pass() == []
                assert await b.run_pass() is None
            await flush(a, b)
            # a's read and b's try each pass; their flushes; the probe's read and flush: and at
            # most OTHERS by backends outside the test (autovacuum on the catalogs of a freshly
            # migrated database), where a pass that locked each topic would add 10,000 a pass.
            ours = 2 * PASSES + 2 + 2
            delta = await commits(probe) - before
            assert ours <= delta <= ours + OTHERS, delta
            cur = await probe.execute("SELECT count(*) FROM gaps")
            assert await cur.fetchone() == (2,)  # nothing trimmed twice

            # The leader goes, its connection and lock with it (once its backend has exited):
            # b takes over on a next pass.
            await a.close()

            async def b_leads() -> bool:
                return await b.run_pass() == []

            await wait_for(b_leads, timeout=10, what="b to take the leader's lock")
            assert b.leading
        finally:
            await a.close()
            await b.close()
