"""One wid, one stream: a second GET takes the session over, the older stream ends at once and
never writes the session's cursors again (fenced in PostgreSQL, so also across services); the
idle GC never takes a session with an open stream; a client that goes away is noticed within a
second, not at the next heartbeat."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support import wait_for
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


async def test_a_stream_taken_over_elsewhere_never_writes_the_cursors_again(
    api, db, make_service, http
):
    """The older stream runs in another service: no in-process signal reaches it; its first
    cursor write after the takeover matches no row, and it ends."""
    other = Api(http, (await make_service()).url)
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    first = await live_stream(other, topic, wid, 3)
    await wait_for(lambda: flushed(db, wid, {topic: 3}), what="the first stream's cursors")

    # The newer stream rewinds to 1, re-reads 2..3 and leaves; the session says 3, unleased.
    second = await api.stream(wid, last_event_id=cursor_id({topic: 1}))
    assert (await session_row(db, wid))["cursors"] == {topic: 1}  # the rewind is stored at once
    assert await second.frame() == record_frame(
        topic, await api.records(topic, 1), 1, 3, {topic: 1}
    )
    assert await second.frame() == caught_up_frame(topic, 3, {topic: 3})
    second.close()
    await wait_for(stream_closed_with(db, wid, {topic: 3}), what="the second stream's cursors")

    # The older stream still delivers 4..6, then its cursor write is refused and it ends.
    await api.append(topic, 4, 5, 6)
    assert await first.frame() == record_frame(topic, await api.records(topic, 3), 3, 6, {topic: 3})
    await first.closed(timeout=5.0)
    row = await session_row(db, wid)
    assert row["cursors"] == {topic: 3} and not row["leased"]


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
