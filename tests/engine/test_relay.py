"""The append relay (engine/relay.py): a worker sends appends for a topic it does not own to
the owner, over a real Unix socket, where they join the owner's groups; the answers are what
the owner's own appender gives; an owner that cannot be reached leaves the append local.

Two workers' relays run here in one process, each with its own ``Appender`` on a real
PostgreSQL, so the test can see whose appender wrote what."""

import asyncio

import psycopg
import pytest

from tests.support import unique, wait_for
from watch_service.engine.appender import Appender
from watch_service.engine.relay import AppendRelay, owner_of
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.store import topics as store

pytestmark = pytest.mark.pg


@pytest.fixture
async def pair(pool, tmp_path):
    """Workers 0 and 1 of 2: (appender, relay) each, their sockets in tmp_path."""
    made = []
    for index in (0, 1):
        appender = Appender(pool)
        relay = AppendRelay(appender, index, 2, str(tmp_path))
        await relay.start()
        appender.relay = relay
        made.append((appender, relay))
    yield made
    for _, relay in made:
        await relay.aclose()


async def topic_owned_by(pool, owner: int) -> str:
    while owner_of(name := unique("relay.t"), 2) != owner:
        pass
    async with pool.connection() as conn:
        await store.put_topic(conn, name, TopicConfig(None, None))
    return name


def records(*values: int) -> list[NewRecord]:
    return [NewRecord(str(v), None, None, None) for v in values]


async def test_appends_on_the_non_owner_are_committed_by_the_owner(pool, pair):
    (owner, _), (other, other_relay) = pair
    sent: list[int] = []
    other_relay.on_forward = lambda: sent.append(1)
    topic = await topic_owned_by(pool, 0)
    batches = [records(10 + i, 10 + i) for i in range(5)] + [records(20 + i) for i in range(3)]
    results = await asyncio.gather(
        *(other.append(topic, b) for b in batches[:5]),
        *(owner.append(topic, b) for b in batches[5:]),
    )
    assert len(sent) == 5 and other.statements == 0  # all five went to the owner
    assert 1 <= owner.statements < 8  # merged into the owner's groups
    # each request its own consecutive range; together 1..13 with no gap and no overlap
    assert [r.last_seq - r.first_seq + 1 for r in results] == [2] * 5 + [1] * 3
    assert sorted(s for r in results for s in range(r.first_seq, r.last_seq + 1)) == list(
        range(1, 14)
    )
    async with pool.connection() as conn:
        stored = {r.seq: r.data for r in (await store.read(conn, topic, 0, 100)).records}
    for batch, result in zip(batches, results, strict=True):
        assert [stored[s] for s in range(result.first_seq, result.last_seq + 1)] == [
            r.data for r in batch
        ]


async def test_the_owner_appends_its_own_topics_itself(pool, pair):
    (_, _), (other, other_relay) = pair
    sent: list[int] = []
    other_relay.on_forward = lambda: sent.append(1)
    topic = await topic_owned_by(pool, 1)
    result = await other.append(topic, records(1))
    assert (result.first_seq, sent, other.statements) == (1, [], 1)


async def test_the_owners_answers_come_back_as_they_are(pool, pair):
    (_, _), (other, _) = pair
    missing = unique("relay.none")
    while owner_of(missing, 2) != 0:
        missing = unique("relay.none")
    assert await other.append(missing, records(1)) is None  # unknown topic: 404 upstream
    topic = await topic_owned_by(pool, 0)
    bad = [NewRecord("1", None, None, "n" * 129)]  # breaks the node CHECK at the owner
    with pytest.raises(RuntimeError, match="internal server error"):
        await other.append(topic, bad)
    result = await other.append(topic, records(7))
    assert (result.first_seq, result.last_seq) == (1, 1)  # the refused one took no seq


async def test_an_owner_that_is_gone_leaves_the_append_local(pool, pair, caplog):
    (_, owner_relay), (other, other_relay) = pair
    topic = await topic_owned_by(pool, 0)
    await other.append(topic, records(1))  # connected and relayed
    assert other.statements == 0
    await owner_relay.aclose()
    await wait_for(lambda: not other_relay.peers, 5, "the lost connection is noticed")
    result = await other.append(topic, records(2))  # within RETRY_S: not even tried
    assert (result.first_seq, other.statements) == (2, 1)


async def test_an_owner_that_never_started_leaves_the_append_local(pool, tmp_path, caplog):
    appender = Appender(pool)
    relay = AppendRelay(appender, 1, 2, str(tmp_path))  # worker 0's socket does not exist
    await relay.start()
    appender.relay = relay
    try:
        topic = await topic_owned_by(pool, 0)
        result = await appender.append(topic, records(1))
        assert (result.first_seq, appender.statements) == (1, 1)
        assert "worker 0 unreachable" in caplog.text
    finally:
        await relay.aclose()


async def test_a_connection_lost_mid_request_fails_it_as_unavailable(pool, pair, pg_url):
    """Whether such an append committed is unknown to the worker that sent it (as with a
    PostgreSQL connection lost mid-commit): here it does commit, once the lock is free."""
    (owner, owner_relay), (other, _) = pair
    topic = await topic_owned_by(pool, 0)
    await other.append(topic, records(1))
    async with await psycopg.AsyncConnection.connect(pg_url) as locker:
        # The topic's row lock held elsewhere: the owner's statement waits in PostgreSQL.
        await locker.execute("SELECT 1 FROM topics WHERE name = %s FOR UPDATE", (topic,))
        request = asyncio.create_task(other.append(topic, records(2)))
        await wait_for(lambda: owner.in_flight, 5, "the owner's statement under way")
        for proto in list(owner_relay.served):
            proto.transport.close()
        with pytest.raises(psycopg.OperationalError, match="relay to worker 0 was lost"):
            await request
        await locker.rollback()
    await wait_for(lambda: not owner.in_flight, 5, "the owner's statement done")
    async with pool.connection() as conn:
        assert (await store.get_topic(conn, topic)).head_seq == 2
