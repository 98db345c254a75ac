"""Group commit: concurrent appends to one topic share a statement, each keeps its own
consecutive range, and a request that fails in a merged statement fails alone."""

import asyncio

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.support import wait_for
from watch_service.engine.appender import SECOND_AT, Appender
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.store import topics as store

pytestmark = pytest.mark.pg


@pytest.fixture
async def pool(pg_url):
    async with AsyncConnectionPool(
        pg_url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True}
    ) as pool:
        yield pool


def batch(label: str, n: int, node: str | None = None) -> list[NewRecord]:
    return [NewRecord(data=f'"{label}{i}"', meta=None, tag=None, node=node) for i in range(n)]


async def contents(pool, topic):
    async with pool.connection() as conn:
        result = await store.read(conn, topic, 0, 1000)
    return [(r.seq, r.data) for r in result.records]


async def test_concurrent_requests_share_one_statement_with_their_own_ranges(pool, topic_name):
    async with pool.connection() as conn:
        await store.put_topic(conn, topic_name, TopicConfig(None, None))
    appender = Appender(pool)
    results = await asyncio.gather(*(appender.append(topic_name, batch(x, 3)) for x in "abc"))
    assert [(r.first_seq, r.last_seq) for r in results] == [(1, 3), (4, 6), (7, 9)]
    assert {r.ts for r in results} == {results[0].ts}  # one statement, one timestamp
    assert await contents(pool, topic_name) == [
        (i + 1, f'"{x}{j}"') for i, (x, j) in enumerate((x, j) for x in "abc" for j in range(3))
    ]


async def test_a_failing_request_fails_alone_and_writes_nothing(pool, topic_name):
    async with pool.connection() as conn:
        await store.put_topic(conn, topic_name, TopicConfig(None, None))
    appender = Appender(pool)
    uncertain: list[str] = []
    appender.uncertain = uncertain.append  # a failed statement has the topic read again
    bad = batch("b", 2) + batch("x", 1, node="n" * 129)  # breaks the node CHECK in the DB
    results = await asyncio.gather(
        appender.append(topic_name, batch("a", 2)),
        appender.append(topic_name, bad),
        appender.append(topic_name, batch("c", 2)),
        return_exceptions=True,
    )
    assert isinstance(results[1], psycopg.errors.CheckViolation)
    assert [(r.first_seq, r.last_seq) for r in (results[0], results[2])] == [(1, 2), (3, 4)]
    assert await contents(pool, topic_name) == [(1, '"a0"'), (2, '"a1"'), (3, '"c0"'), (4, '"c1"')]
    assert uncertain and set(uncertain) == {topic_name}


async def test_unknown_topic_answers_none_to_every_request(pool, topic_name):
    appender = Appender(pool)
    results = await asyncio.gather(*(appender.append(topic_name, batch(x, 1)) for x in "ab"))
    assert results == [None, None]


async def test_concurrent_single_record_requests_are_grouped(pool, topic_name):
    """Fifty writers' single records: a few statements, each request its own seq, in order."""
    async with pool.connection() as conn:
        await store.put_topic(conn, topic_name, TopicConfig(None, None))
    appender = Appender(pool)
    results = await asyncio.gather(
        *(appender.append(topic_name, batch(f"w{i}-", 1)) for i in range(50))
    )
    assert [(r.first_seq, r.last_seq) for r in results] == [(i, i) for i in range(1, 51)]
    assert appender.statements <= 2
    assert await contents(pool, topic_name) == [(i + 1, f'"w{i}-0"') for i in range(50)]
    # The queue is gone once drained; the next request starts a new drain and is not lost.
    assert appender.queues == {}
    again = await appender.append(topic_name, batch("late", 1))
    assert (again.first_seq, appender.queues) == (51, {})


async def _waiting(conn, n: int) -> bool:
    """``n`` append statements wait on a lock (the topic's row, held by ``conn``)."""
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database()"
    )
    return (await cur.fetchone())[0] == n


async def test_a_big_group_goes_out_while_a_statement_is_in_flight(pool, pg_url, topic_name):
    """With a statement of the topic in flight, ``SECOND_AT`` queued records go out at once on
    a second connection (PostgreSQL holds them on the topic's row lock); small requests wait
    and merge. Every request keeps its own range, in the order the lock let them commit."""

    async with pool.connection() as conn:
        await store.put_topic(conn, topic_name, TopicConfig(None, None))
    appender = Appender(pool)
    async with await psycopg.AsyncConnection.connect(pg_url) as locker:
        # Hold the topic's row lock: the appender's statements queue behind it in PostgreSQL.
        await locker.execute("SELECT 1 FROM topics WHERE name = %s FOR UPDATE", (topic_name,))
        first = asyncio.ensure_future(appender.append(topic_name, batch("a", 1)))
        await wait_for(lambda: _waiting(locker, 1), what="the first statement on the lock")
        small = [asyncio.ensure_future(appender.append(topic_name, batch(x, 1))) for x in "bc"]
        big = asyncio.ensure_future(appender.append(topic_name, batch("d", SECOND_AT)))
        await wait_for(lambda: _waiting(locker, 2), what="a second statement on the lock")
        assert appender.statements == 2
        await locker.rollback()  # the lock goes: both statements commit, one after the other
    results = [await first, *[await s for s in small], await big]
    assert appender.statements == 2  # a, then b + c + d merged by the second drain
    assert [(r.first_seq, r.last_seq) for r in results] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 3 + SECOND_AT),
    ]
    assert appender.queues == {}
