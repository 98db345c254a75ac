"""One wid, one stream: a second GET takes the session over, the older stream ends at once and
never writes the session's cursors again (fenced in PostgreSQL, so also across services); a
stream in another service is asked to store its cursors first (bounded wait); the
idle GC never takes a session with an open stream; a client that goes away is noticed within a
second, not at the next heartbeat."""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg.types.json import Jsonb

from tests.support import wait_for
from watch_service.server.stream_upkeep import TAKEOVER_WAIT_S
from watch_service.web.app_keys import STREAMS

from .conftest import Api, session_row, stream_closed_with
from .wire import caught_up_frame, cursor_id, record_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def live_stream(api: Api, topic: str, wid: str, head: int):
    stream = await api.stream(wid)
    if head:
        assert await stream.frame() == record_frame(
            topic, await api.records(topic), 0, head, {topic: 0}
        )
    assert await stream.frame() == caught_up_frame(topic, head, {topic: head})
    return stream


async def test_a_second_get_takes_over_and_the_first_ends_at_once(api, db, service):
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    first = await live_stream(api, topic, wid, 3)

    second = await api.stream(wid, last_event_id=cursor_id({topic: 1}))  # rewinds
    await first.closed(timeout=1.0)
    assert await second.frame() == record_frame(
        topic, await api.records(topic, 1), 1, 3, {topic: 1}
    )
    assert await second.frame() == caught_up_frame(topic, 3, {topic: 3})
    await api.append(topic, 4)
    assert await second.frame() == record_frame(
        topic, await api.records(topic, 3), 3, 4, {topic: 3}
    )
    assert [s.wid for s in service.app[STREAMS] if not s.closed].count(wid) == 1
    second.close()
    await wait_for(stream_closed_with(db, wid, {topic: 4}), what="the second stream's cursors")


async def flushed(db, wid: str, cursors: dict[str, int]) -> bool:
    return (await session_row(db, wid))["cursors"] == cursors


async def test_a_stream_taken_over_elsewhere_stores_its_cursors_first(api, db, make_service, http):
    """The older stream runs in another service whose batched cursor writes are far apart:
    the newer GET asks it (NOTIFY) to store what it has written, waits for that, and
    continues after it: nothing is delivered twice, and the older stream has ended."""
    other = Api(http, (await make_service(cursor_flush_ms=60000)).url)
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    first = await live_stream(other, topic, wid, 3)
    await api.append(topic, 4, 5, 6)
    assert await first.frame() == record_frame(topic, await api.records(topic, 3), 3, 6, {topic: 3})
    assert (await session_row(db, wid))["cursors"] == {topic: 0}  # as it opened: write-behind

    second = await api.stream(wid)
    await first.closed(timeout=1.0)
    assert await second.frame() == caught_up_frame(topic, 6, {topic: 6})
    row = await session_row(db, wid)
    assert row["cursors"] == {topic: 6} and row["leased"]
    second.close()
    await wait_for(stream_closed_with(db, wid, {topic: 6}), what="the second stream's cursors")


async def test_a_stream_fenced_off_never_writes_the_cursors_again(api, db, make_service, http):
    """A takeover whose request never reached the older stream (its holder did not answer in
    time) fences it off: its first cursor write after it matches no row, and it ends."""
    other = Api(http, (await make_service()).url)
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    first = await live_stream(other, topic, wid, 3)
    await wait_for(lambda: flushed(db, wid, {topic: 3}), what="the first stream's cursors")
    await db.execute(  # what sessions.open_stream does, then the newer stream's own release
        "UPDATE watch_sessions SET stream_gen = stream_gen + 1, cursors = %s, "
        "stream_lease_until = NULL WHERE wid = %s",
        (Jsonb({topic: 1}), wid),
    )
    await api.append(topic, 4, 5, 6)
    assert await first.frame() == record_frame(topic, await api.records(topic, 3), 3, 6, {topic: 3})
    await first.closed(timeout=5.0)
    row = await session_row(db, wid)
    assert row["cursors"] == {topic: 1} and not row["leased"]


async def test_a_takeover_nobody_answers_waits_its_bound_only(api, db):
    """A live lease whose holder is gone (a replica that crashed): the GET asks, waits
    ``TAKEOVER_WAIT_S``, and opens from the stored cursors."""
    topic = await api.topic()
    await api.append(topic, 1, 2)
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    await db.execute(
        "UPDATE watch_sessions SET cursors = %s, stream_gen = stream_gen + 1, "
        "stream_lease_until = now() + interval '30 seconds' WHERE wid = %s",
        (Jsonb({topic: 1}), wid),
    )
    asked = time.monotonic()
    stream = await api.stream(wid)
    assert time.monotonic() - asked >= TAKEOVER_WAIT_S
    assert await stream.frame() == record_frame(
        topic, await api.records(topic, 1), 1, 2, {topic: 1}
    )
    assert await stream.frame() == caught_up_frame(topic, 2, {topic: 2})
    stream.close()
    await wait_for(stream_closed_with(db, wid, {topic: 2}), what="the stream's cursors")


async def test_the_gc_never_takes_a_session_with_an_open_stream(make_service, http, db):
    svc = await make_service(session_ttl_ms=100)
    api = Api(http, svc.url)
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    first = await live_stream(api, topic, wid, 0)
    second = await live_stream(api, topic, wid, 0)  # takes over; the first's close keeps the lease
    await first.closed(timeout=1.0)

    async def idle_past_ttl() -> bool:
        cur = await db.execute(
            "SELECT last_active_at < now() - interval '300 milliseconds' FROM watch_sessions "
            "WHERE wid = %s",
            (wid,),
        )
        return (await cur.fetchone())[0]

    await wait_for(idle_past_ttl, what="the session to be idle past its TTL")
    await api.watch({"topics": {topic: {}}})  # runs the GC
    assert (await session_row(db, wid))["leased"]
    await api.append(topic, 1)
    assert await second.frame() == record_frame(topic, await api.records(topic), 0, 1, {topic: 0})
    second.close()


async def test_a_client_that_disconnects_is_noticed_within_a_second(make_service, http, db):
    svc = await make_service()
    api = Api(http, svc.url)
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    stream = await live_stream(api, topic, wid, 0)
    assert len(svc.app[STREAMS]) == 1
    stream.close()
    gone = time.monotonic()
    await wait_for(
        stream_closed_with(db, wid, {topic: 0}), timeout=1.0, what="the lease to be released"
    )
    assert not svc.app[STREAMS]
    assert time.monotonic() - gone < 1.0
    await asyncio.sleep(0)
