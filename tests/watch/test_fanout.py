"""Fan-out at the tail: streams live at a topic's tail get their frames pushed by the topic's
shared tailer, built once per group of identical options; the bytes are exactly those paging
would give (pages under ``limit``, ``caught-up`` after a page left the topic short of its
head). A stream whose socket buffer fills leaves the live set, pages on its own, and rejoins
once caught up."""

from __future__ import annotations

import asyncio
import contextlib
import json
from functools import partial

import pytest

from tests.support import wait_for
from watch_service.protocol.requests import NewRecord
from watch_service.store import topics as store
from watch_service.web.app_keys import HUB, POOL

from .conftest import Api, stream_closed_with
from .test_backpressure import RawSseClient
from .wire import RETRY, caught_up_frame, expect_per_topic, fields, record_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]
STREAMS = 12


async def test_live_streams_get_shared_frames_pushed_with_their_own_ids(api, service):
    topic, other = await api.topic(), await api.topic()
    options = [{}, {"include_data": False}, {"include_tags": True}]
    watches = []
    for n in range(STREAMS):
        opts = options[n % len(options)]
        body = {"topics": {topic: {}, other: {}}, "heartbeat_ms": 60000, **opts}
        wid = (await api.watch(body))["wid"]
        stream = await api.stream(wid)
        await expect_per_topic(
            stream,
            {topic: 0, other: 0},
            {t: [partial(caught_up_frame, t, 0)] for t in (topic, other)},
        )
        watches.append((stream, opts))
    tailer = service.app[HUB].tailers[topic]
    await wait_for(lambda: len(tailer.live) == STREAMS, what="every stream to join the live set")

    await api.append(topic, {"data": {"n": 1}, "tag": "t1"}, {"data": 2})
    records = await api.records(topic)
    for stream, opts in watches:
        flags = {"data": opts.get("include_data", True), "tags": opts.get("include_tags", False)}
        assert await stream.frame() == record_frame(
            topic, records, 0, 2, {topic: 0, other: 0}, **flags
        )
    assert len(tailer.live) == STREAMS  # still live: no stream fell back to paging
    for stream, _ in watches:
        stream.close()


async def test_a_push_larger_than_a_page_is_paged_then_caught_up(api):
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "limit": 2, "heartbeat_ms": 60000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    await api.append(topic, 1, 2, 3, 4, 5)
    recs = await api.records(topic)
    assert await stream.frames(4) == [
        record_frame(topic, recs[0:2], 0, 5, {topic: 0}),
        record_frame(topic, recs[2:4], 2, 5, {topic: 2}),
        record_frame(topic, recs[4:5], 4, 5, {topic: 4}),
        caught_up_frame(topic, 5, {topic: 5}),
    ]
    stream.close()


async def test_a_stream_whose_buffer_fills_pages_on_its_own_and_rejoins(make_service, http):
    svc = await make_service(write_timeout_s=30.0)
    api = Api(http, svc.url)
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    slow = await RawSseClient.open(svc.port, f"/v0/watch/{wid}")
    assert await slow.frame() == RETRY
    assert await slow.frame() == caught_up_frame(topic, 0, {topic: 0})
    tailer = svc.app[HUB].tailers[topic]
    await wait_for(lambda: len(tailer.live) == 1, what="the stream to join the live set")

    # The client does not read: ~12 MB cannot fit in the socket buffers, the stream leaves.
    payload = "p" * 100_000
    for _ in range(12):
        await api.append(topic, *[payload] * 10)
    head = 120
    await wait_for(lambda: len(tailer.live) == 0, what="the full stream to leave the live set")

    # Reading again: every record once, in order, pushed or paged; each run of several pages
    # ends with a caught-up at the head it reached, and the last run ends at the head.
    records = {r["$seq"]: r for r in await api.records(topic)}
    cursor, caught_up = 0, False
    while not (cursor == head and caught_up):
        raw = await slow.frame()
        picked = json.loads(fields(raw)["data"])  # picks the expectation
        caught_up = "to_seq" not in picked
        if caught_up:
            assert raw == caught_up_frame(topic, cursor, {topic: cursor})
            continue
        last, known_head = picked["to_seq"], picked["head_seq"]
        page = [records[seq] for seq in range(cursor + 1, last + 1)]
        assert raw == record_frame(topic, page, cursor, known_head, {topic: cursor})
        cursor = last
    await wait_for(lambda: len(tailer.live) == 1, what="the stream to rejoin the live set")
    await api.append(topic, 121)
    assert await slow.frame() == record_frame(
        topic, await api.records(topic, head), head, head + 1, {topic: head}
    )
    slow.close()
    await asyncio.sleep(0)


async def test_an_http_1_0_client_gets_the_same_frames_unchunked(api, service):
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
    writer.write(f"GET /v0/watch/{wid} HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n".encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.0 200 OK\r\n") and b"chunked" not in head, head
    first = RETRY + caught_up_frame(topic, 0, {topic: 0})
    assert await asyncio.wait_for(reader.readexactly(len(first)), 10) == first
    tailer = service.app[HUB].tailers[topic]
    await wait_for(lambda: len(tailer.live) == 1, what="the stream to join the live set")
    await api.append(topic, 1)
    pushed = record_frame(topic, await api.records(topic), 0, 1, {topic: 0})
    assert await asyncio.wait_for(reader.readexactly(len(pushed)), 10) == pushed
    writer.close()


async def test_this_process_appends_are_pushed_without_reading_them_back(api, service):
    """Records this process commits go to the live streams as they were sent, with no read of
    the topic; so do another process's, when its NOTIFY can carry them; bigger ones are read."""
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    tailer = service.app[HUB].tailers[topic]
    await wait_for(lambda: len(tailer.live) == 1, what="the stream to join the live set")
    reads = tailer.reads

    for n in (1, 2, 3):  # numbers spelled as sent: the frames carry the request's text
        body = b'{"records":[{"data":{"n":%d,"exact":1.10,"big":1E400}}]}' % n
        async with api.http.post(
            f"{api.url}/v0/topics/{topic}/records",
            data=body,
            headers={**api.headers, "Content-Type": "application/json"},
        ) as r:
            assert r.status == 200, await r.text()
            ts = (await r.json())["ts"]
        sent = {"$seq": n, "$ts": ts, "data": {"n": n, "exact": "as sent"}}
        assert await stream.frame() == record_frame(
            topic, [sent], n - 1, n, {topic: n - 1}
        ).replace(b'"exact":"as sent"', b'"exact":1.10,"big":1E400')
    assert tailer.reads == reads  # taken from the appends themselves, not read back

    # Another process's append carries its records in its NOTIFY when they fit: taken as
    # they are (seq 4); one too big for a NOTIFY says only where the head is, and the tailer
    # reads it (seq 5). Every seq once, in order.
    big = '{"pad":"%s"}' % ("x" * (store.NOTIFY_RECORDS_BYTES + 1))
    async with service.app[POOL].connection() as conn:
        await store.append(conn, topic, [NewRecord('{"from":"elsewhere"}', None, None, None)])
        seqs = [r["$seq"] for r in json.loads(fields(await stream.frame())["data"])["records"]]
        assert (seqs, tailer.reads) == ([4], reads)
        await store.append(conn, topic, [NewRecord(big, None, None, None)])
    assert [r["$seq"] for r in json.loads(fields(await stream.frame())["data"])["records"]] == [5]
    assert tailer.reads == reads + 1
    stream.close()


async def test_appends_offered_before_a_push_starts_join_it_without_a_read(api, service):
    """Two appends committed in one transaction reach the LISTEN connection together, so the
    second is offered before the first one's push has started: both go out in that push, one
    frame as paging would give it, taken as they were sent, not read back."""

    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    tailer = service.app[HUB].tailers[topic]
    await wait_for(lambda: len(tailer.live) == 1, what="the stream to join the live set")
    reads = tailer.reads
    async with service.app[POOL].connection() as conn, conn.transaction():
        for n in (1, 2):
            await store.append(conn, topic, [NewRecord(f'{{"n":{n}}}', None, None, None)])
    records = await api.records(topic)
    assert await stream.frame() == record_frame(topic, records, 0, 2, {topic: 0})
    assert (tailer.reads, len(tailer.live)) == (reads, 1)  # not read back; still live
    stream.close()


async def test_appends_offered_during_a_read_are_taken_without_another_read(api, service):
    """Appends offered while the tailer reads (after a LISTEN, say, or a safety poll's kick)
    wait for that read and are taken from it, or as they were sent: no read of their own, so
    a busy topic's tailer does not read once per append. Every seq once, in order."""
    topic, stream, tailer = await live_and_idle(api, service.app)
    reads = tailer.reads
    async with a_read_waiting(service.app, tailer) as conn:
        for n in (1, 2, 3):  # another process's appends: their NOTIFYs carry the records
            await store.append(conn, topic, [NewRecord(f'{{"n":{n}}}', None, None, None)])
        await wait_for(lambda: len(tailer._queued) == 3, what="the three appends offered")
        assert tailer.reads == reads + 1  # started, waiting for a connection
    records = await api.records(topic)
    assert await stream.frame() == record_frame(topic, records, 0, 3, {topic: 0})
    await api.append(topic, 4)  # taken as sent once the read is done
    (fourth,) = [r for r in await api.records(topic) if r["$seq"] == 4]
    assert await stream.frame() == record_frame(topic, [fourth], 3, 4, {topic: 3})
    assert (tailer.reads, len(tailer.live)) == (reads + 1, 1)
    stream.close()


async def test_what_waits_for_a_read_is_bounded_in_bytes(make_service, http):
    """Appends offered during a long read wait for it only up to an eighth of the cache's
    byte bound; past it they are dropped and read after it. Every seq once, in order."""
    svc = await make_service(tail_cache_bytes=8192)  # 1,024 bytes may wait for a read
    topic, stream, tailer = await live_and_idle(Api(http, svc.url), svc.app)
    async with a_read_waiting(svc.app, tailer) as conn:
        for n in (1, 2, 3):  # ~950 bytes each as cached: the second one is past the bound
            data = f'{{"n":{n},"pad":"{"x" * 700}"}}'
            await store.append(conn, topic, [NewRecord(data, None, None, None)])
        third = lambda: [q.seq for q in tailer._queued] == [3]  # noqa: E731
        await wait_for(third, what="1 and 2 dropped, 3 waiting")
        assert tailer._queued_bytes <= 1024
    seqs: list[int] = []
    while len(seqs) < 3:
        frame = fields(await stream.frame())
        if frame.get("event") == "record":
            seqs += [r["$seq"] for r in json.loads(frame["data"])["records"]]
    assert seqs == [1, 2, 3]
    stream.close()


async def test_a_trim_moves_the_tailers_start_without_a_read(api, service):
    """Retention's NOTIFY tells the tailers the new start: a tailer taking appends without
    reading them still knows which seqs are gone (a stream behind them gets its tombstone)."""
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    tailer = service.app[HUB].tailers[topic]
    await api.append(topic, 1, 2, 3, 4, 5)
    await stream.frame()
    reads = tailer.reads
    await api._call("PUT", f"/v0/topics/{topic}", json={"max_records": 2})  # trims 1..3
    await wait_for(lambda: tailer.earliest == 4, what="the tailer to hear of the trim")
    assert tailer.reads == reads
    stream.close()


async def live_and_idle(api: Api, app) -> tuple[str, object, object]:
    """A new topic with one stream live at its tail, its tailer done with the reads the
    stream's LISTEN started: (topic, stream, tailer)."""
    topic = await api.topic()
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    tailer = app[HUB].tailers[topic]
    await wait_for(lambda: len(tailer.live) == 1, what="the stream to join the live set")
    idle = lambda: tailer._task is None or tailer._task.done()  # noqa: E731
    await wait_for(idle, what="the tailer's reads after the LISTEN done")
    return topic, stream, tailer


@contextlib.asynccontextmanager
async def a_read_waiting(app, tailer):
    """The tailer kicked into a read that waits for a connection: every pool connection is
    held meanwhile; yields one of them (for appends of "another process")."""
    pool = app[POOL]
    held = [await pool.getconn() for _ in range(pool.max_size)]
    try:
        tailer.kick()
        yield held[0]
    finally:
        for conn in held:
            await pool.putconn(conn)


async def test_one_topic_streams_share_a_run_and_leave_it_with_exactly_what_they_got(
    api, db, service
):
    """The one-topic streams of one option group form the tailer's run: the same bytes to
    each, one cursor for all. One whose client goes away leaves it with its own cursor at
    what it was written, so its session resumes after exactly that, while the others go on."""
    topic = await api.topic()
    streams, wids = [], []
    for _ in range(4):
        wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
        stream = await api.stream(wid)
        assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
        streams.append(stream)
        wids.append(wid)
    tailer = service.app[HUB].tailers[topic]
    await wait_for(lambda: len(tailer.live) == 4, what="every stream to join the live set")
    [run] = tailer.live.runs.values()
    assert len(run.members) == 4 and not tailer.live.groups

    await api.append(topic, 1, 2)
    first = record_frame(topic, await api.records(topic), 0, 2, {topic: 0})
    for stream in streams:
        assert await stream.frame() == first
    gone = streams.pop()
    gone.close()
    await wait_for(stream_closed_with(db, wids[-1], {topic: 2}), what="the gone stream's cursors")
    assert len(run.members) == 3

    await api.append(topic, 3)
    recs = await api.records(topic, 2)
    for stream in streams:
        assert await stream.frame() == record_frame(topic, recs, 2, 3, {topic: 2})
    assert run.cursor == 3
    resumed = await api.stream(wids[-1])  # no Last-Event-ID: the session's own cursor
    assert await resumed.frame() == record_frame(topic, recs, 2, 3, {topic: 2})
    assert await resumed.frame() == caught_up_frame(topic, 3, {topic: 3})
    for stream in [*streams, resumed]:
        stream.close()
