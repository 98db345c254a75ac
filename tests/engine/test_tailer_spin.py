"""The shared tailer goes idle after a fault: when every record after its cache was trimmed
while it heard nothing (its LISTEN connection was down), one re-read restarts the cache at the
head instead of re-reading the same empty range in a loop; and the last subscriber leaving
cancels its task. Real PostgreSQL; the hub's LISTEN loop is not started, which is the state a
reset LISTEN connection leaves it in. And the hub LISTENs only while it has tailers."""

from __future__ import annotations

import asyncio

import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from tests.support import call, unique, wait_for
from watch_service.engine import hub as hub_module
from watch_service.engine.hub import Hub
from watch_service.store.retention import CHANNEL, current_ms, trim

pytestmark = [pytest.mark.pg]


async def put(http, service, topic: str, **cfg) -> None:
    status, body = await call(http, "PUT", f"{service.url}/v0/topics/{topic}", json=cfg)
    assert status == 201, body


async def append(http, service, topic: str, *values) -> None:
    records = [{"data": v} for v in values]
    url = f"{service.url}/v0/topics/{topic}/records"
    status, body = await call(http, "POST", url, json={"records": records})
    assert status == 200, body


@pytest.fixture
async def hub(pg_url):
    pool = AsyncConnectionPool(pg_url, min_size=1, max_size=2, open=False)
    await pool.open()
    hub = Hub(pool, pg_url)
    yield hub
    await hub.aclose()
    await pool.close()


async def test_a_tailer_whose_unread_records_were_trimmed_reads_once_and_goes_idle(
    hub, db, http, service
):
    topic = unique("spin")
    await put(http, service, topic, ttl_ms=60_000)
    await append(http, service, topic, 1)
    woken = asyncio.Event()
    tailer = hub.subscribe(topic, lambda _t: woken.set())
    await wait_for(lambda: tailer.cache_end == 1, what="the tailer's first read")

    # Unheard (no LISTEN): three appends, then ttl trims every record.
    await append(http, service, topic, 2, 3, 4)
    await trim(db, topic, now_ms=current_ms() + 3_600_000)

    reads = tailer.reads
    woken.clear()
    tailer.kick(4)  # what the safety poll (or a LISTEN reconnect) does
    task = tailer._task
    assert task is not None
    await asyncio.wait_for(asyncio.shield(task), 5)
    assert tailer.reads - reads <= 2, f"{tailer.reads - reads} reads: the tailer spins"
    assert (tailer.cache_end, tailer.head, tailer.earliest) == (4, 4, 5)
    assert woken.is_set()  # subscribers page on their own and get their tombstone

    tailer.kick()  # idle: one more read finds nothing and stops
    await asyncio.wait_for(asyncio.shield(tailer._task), 5)
    assert tailer.reads - reads <= 3


async def test_the_last_subscriber_leaving_cancels_the_tailer_task(hub, http, service):
    topic = unique("spin")
    await put(http, service, topic)

    def wake(_t: str) -> None:
        pass

    tailer = hub.subscribe(topic, wake)
    task = tailer._task
    assert task is not None and not task.done()
    hub.unsubscribe(topic, wake)
    assert topic not in hub.tailers
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert tailer._task is None


async def test_the_listen_loop_backs_off_one_line_per_attempt(caplog):
    pool = AsyncConnectionPool("postgresql://127.0.0.1:1/none", min_size=0, max_size=1, open=False)
    hub = Hub(pool, "postgresql://127.0.0.1:1/none?connect_timeout=1")
    task = asyncio.create_task(hub.run())
    with caplog.at_level("WARNING", logger="auditsync.tailer"):
        await wait_for(lambda: len(caplog.records) >= 3, what="three reconnect attempts")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    lines = [r.getMessage() for r in caplog.records]
    assert all("\n" not in line for line in lines), lines
    delays = [float(line.rsplit(" ", 1)[1].rstrip("s")) for line in lines[:3]]
    assert delays == [0.1, 0.2, 0.4]


async def test_the_hub_listens_only_while_it_has_tailers(pool, pg_url, db, http, service):
    """A process that serves no stream is not woken by every commit: its hub connects but
    LISTENs from the first tailer on, hears the next append through that LISTEN, and
    UNLISTENs once the last tailer has gone."""
    name = unique("hub")
    hub = Hub(pool, make_conninfo(pg_url, application_name=name))
    task = asyncio.create_task(hub.run())

    async def last_statement() -> str | None:
        cur = await db.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s", (name,)
        )
        row = await cur.fetchone()
        return None if row is None else row[0]

    try:
        topic = unique("lazy")
        await put(http, service, topic)
        await wait_for(lambda: _is(last_statement(), ""), what="the hub's connection")
        await append(http, service, topic, 1)  # nobody follows it: not heard
        assert await last_statement() == ""

        woken = asyncio.Event()
        tailer = hub.subscribe(topic, lambda _t: woken.set())
        await wait_for(lambda: _is(last_statement(), f"LISTEN {CHANNEL}"), what="LISTEN")
        for seq in (2, 3):  # the 3rd is heard: LISTEN's own re-read is long over by then
            woken.clear()
            await append(http, service, topic, seq)
            await asyncio.wait_for(woken.wait(), 5)
            await wait_for(lambda s=seq: tailer.cache_end == s, what=f"seq {seq} read")

        hub.unsubscribe(topic, lambda _t: None)  # not its subscriber: still listening
        hub.unsubscribe(topic, next(iter(tailer.subs)))
        await wait_for(lambda: _is(last_statement(), f"UNLISTEN {CHANNEL}"), what="UNLISTEN")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await hub.aclose()


async def _is(value, expected) -> bool:
    return await value == expected


async def test_the_safety_poll_reads_only_topics_heard_of_by_nothing(
    hub, http, service, monkeypatch
):
    """A topic whose notifications arrive shows its head with the next one; only a quiet
    topic can hide a lost notification, so only quiet topics' heads are read (a busy topic's
    row, updated by every append, is left alone). Here nothing LISTENs: what the quiet topic
    got is found by the poll alone."""
    monkeypatch.setattr(hub_module, "SAFETY_POLL_S", 0.2)
    busy, quiet = unique("busy"), unique("quiet")
    for topic in (busy, quiet):
        await put(http, service, topic)
    tailers = {t: hub.subscribe(t, lambda _t: None) for t in (busy, quiet)}
    await wait_for(lambda: sorted(hub.quiet_topics()) == sorted([busy, quiet]), what="quiet")
    hub.dispatch(f"a 0 {busy}")  # news of ``busy`` (its head is not past the tailer's)
    assert hub.quiet_topics() == [quiet]

    poll = asyncio.create_task(hub.safety_poll())
    try:
        await append(http, service, quiet, 1, 2)
        await wait_for(lambda: tailers[quiet].cache_end == 2, what="the poll's read")
    finally:
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
