"""Group commit: concurrent appends to one topic share a statement, each keeps its own
consecutive range, and a request that fails in a merged statement fails alone."""

import asyncio

import psycopg
import pytest

from watch_service.engine.appender import Appender
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.store import topics as store

pytestmark = pytest.mark.pg


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
