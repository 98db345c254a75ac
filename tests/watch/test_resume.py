"""Exact resume: server-side cursors after a dropped connection, after a service restart and on
another service process sharing the database; ``Last-Event-ID`` only ever rewinds, and a
garbage one is treated as absent; one above a topic's head gets a ``rewound`` frame."""

from __future__ import annotations

import asyncio
import base64
from functools import partial

import pytest

from tests.support import ServiceProcess, wait_for

from .conftest import Api, session_row, stream_closed_with
from .wire import (
    caught_up_frame,
    compact,
    cursor_id,
    expect_per_topic,
    frame,
    record_frame,
    rewound_frame,
)

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def test_reconnect_without_last_event_id_continues_after_what_was_written(api, db):
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 1000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == record_frame(topic, await api.records(topic), 0, 3, {topic: 0})
    assert await stream.frame() == caught_up_frame(topic, 3, {topic: 3})
    stream.close()
    await wait_for(stream_closed_with(db, wid, {topic: 3}), what="the dropped stream's cursors")

    await api.append(topic, 4, 5)
    stream = await api.stream(wid)
    assert await stream.frame() == record_frame(
        topic, await api.records(topic, 3), 3, 5, {topic: 3}
    )
    assert await stream.frame() == caught_up_frame(topic, 5, {topic: 5})
    stream.close()


async def test_last_event_id_rewinds_but_never_advances(api, db):
    a, b = await api.topic(), await api.topic()
    await api.append(a, *range(4))
    await api.append(b, *range(2))
    wid = (await api.watch({"topics": {a: {}, b: {}}, "heartbeat_ms": 1000}))["wid"]
    stream = await api.stream(wid)
    ra, rb = await api.records(a), await api.records(b)
    await expect_per_topic(
        stream,
        {a: 0, b: 0},
        {
            a: [partial(record_frame, a, ra, 0, 4), partial(caught_up_frame, a, 4)],
            b: [partial(record_frame, b, rb, 0, 2), partial(caught_up_frame, b, 2)],
        },
    )
    stream.close()
    await wait_for(stream_closed_with(db, wid, {a: 4, b: 2}), what="the stream's cursors")

    # Rewind a to 1: a re-delivers 2..4. b's 5 is above b's head (2): the client holds seqs
    # the source no longer has, which a ``rewound`` frame says before b goes live again.
    stream = await api.stream(wid, last_event_id=cursor_id({a: 1, b: 5}))
    await expect_per_topic(
        stream,
        {a: 1, b: 2},
        {
            a: [partial(record_frame, a, ra[1:], 1, 4), partial(caught_up_frame, a, 4)],
            b: [lambda c: rewound_frame(b, 3, 5, 2, {**c, b: 2}), partial(caught_up_frame, b, 2)],
        },
    )
    stream.close()
    await wait_for(stream_closed_with(db, wid, {a: 4, b: 2}), what="the stream's cursors")

    # A map above both heads gets both rewound frames; a map naming only b rewinds b.
    for last_id, start, expected in [
        (
            cursor_id({a: 10, b: 10}),
            {a: 4, b: 2},
            {
                a: [lambda c: rewound_frame(a, 5, 10, 4, c), partial(caught_up_frame, a, 4)],
                b: [lambda c: rewound_frame(b, 3, 10, 2, c), partial(caught_up_frame, b, 2)],
            },
        ),
        (
            cursor_id({b: 0}),
            {a: 4, b: 0},
            {
                a: [partial(caught_up_frame, a, 4)],
                b: [partial(record_frame, b, rb, 0, 2), partial(caught_up_frame, b, 2)],
            },
        ),
    ]:
        stream = await api.stream(wid, last_event_id=last_id)
        assert await expect_per_topic(stream, start, expected) == {a: 4, b: 2}
        stream.close()
        await wait_for(stream_closed_with(db, wid, {a: 4, b: 2}), what="the stream's cursors")

    # An id ahead of the session's cursor but within the head is ignored: no skip.
    wid = (await api.watch({"topics": {a: {"from_seq": 1}}, "heartbeat_ms": 1000}))["wid"]
    stream = await api.stream(wid, last_event_id=cursor_id({a: 3}))
    assert await stream.frame() == record_frame(a, ra[1:], 1, 4, {a: 1})
    assert await stream.frame() == caught_up_frame(a, 4, {a: 4})
    stream.close()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


GARBAGE = [
    "",
    " ",
    "not base64 !!",
    "====",
    "eyJ",
    b64(b"[1,2]"),
    b64(b"null"),
    b64(b"42"),
    b64(b'{"t":-1}'),
    b64(b'{"t":"3"}'),
    b64(b'{"t":1.5}'),
    b64(b'{"t":true}'),
    b64(b'{"t":99999999999999999999999999}'),
    b64(b'{"t":{"x":1}}'),
    b64(b"\xff\xfe{"),
    b64(b'{"t":1'),
    "A" * 6000,
]


async def test_garbage_last_event_id_is_treated_as_absent(api, db):
    topic = await api.topic()
    await api.append(topic, 1, 2)
    wid = (await api.watch({"topics": {topic: {"from_seq": 1}}}))["wid"]
    for garbage in GARBAGE:
        stream = await api.stream(wid, last_event_id=garbage)
        # Absent: resume from the server's cursor (1, or 2 once a stream stored it).
        raw = await stream.frame()
        assert raw in (
            record_frame(topic, (await api.records(topic))[1:], 1, 2, {topic: 1}),
            caught_up_frame(topic, 2, {topic: 2}),
        ), (garbage, raw)
        stream.close()
    # Non-latin-1 bytes in the header, sent raw.
    reader, writer = await asyncio.open_connection("127.0.0.1", int(api.url.rsplit(":", 1)[1]))
    writer.write(
        f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n".encode()
        + "Last-Event-ID: ünïcødé\r\n\r\n".encode()
    )
    status = await asyncio.wait_for(reader.readline(), 10)
    assert status.startswith(b"HTTP/1.1 200"), status
    writer.close()


async def test_restart_resumes_from_stored_cursors(pg_url, http, db, tmp_path):
    proc = ServiceProcess(pg_url, log_path=tmp_path / "service.log").start()
    try:
        api = Api(http, proc.url)
        topic = await api.topic()
        await api.append(topic, 1, 2, 3)
        wid = (await api.watch({"topics": {topic: {}}}))["wid"]
        stream = await api.stream(wid)
        assert await stream.frame() == record_frame(
            topic, await api.records(topic), 0, 3, {topic: 0}
        )
        assert await stream.frame() == caught_up_frame(topic, 3, {topic: 3})

        await asyncio.to_thread(proc.stop)
        assert await stream.frame() == frame(
            "error",
            compact({"code": "unavailable", "message": "the service is shutting down; reconnect"}),
            None,
        )
        await stream.closed()
        row = await session_row(db, wid)
        assert row["cursors"] == {topic: 3} and not row["leased"]

        await asyncio.to_thread(proc.start)
        await api.append(topic, 4, 5)
        stream = await api.stream(wid)
        recs = await api.records(topic, 3)
        assert await stream.frame() == record_frame(topic, recs, 3, 5, {topic: 3})
        assert await stream.frame() == caught_up_frame(topic, 5, {topic: 5})
        stream.close()
    finally:
        await asyncio.to_thread(proc.stop)


async def test_a_second_process_sharing_the_database(pg_url, http, service, db, tmp_path):
    """POST on one service, stream from another process; records appended on the first reach
    the stream (NOTIFY crosses processes); then the session resumes back on the first."""
    proc = ServiceProcess(pg_url, log_path=tmp_path / "service.log").start()
    try:
        here, there = Api(http, service.url), Api(http, proc.url)
        topic = await here.topic()
        await here.append(topic, 1)
        wid = (await here.watch({"topics": {topic: {}}, "heartbeat_ms": 1000}))["wid"]
        stream = await there.stream(wid)
        assert await stream.frame() == record_frame(
            topic, await here.records(topic), 0, 1, {topic: 0}
        )
        assert await stream.frame() == caught_up_frame(topic, 1, {topic: 1})
        await here.append(topic, 2)
        recs = await here.records(topic, 1)
        assert await stream.frame() == record_frame(topic, recs, 1, 2, {topic: 1})
        stream.close()
        await wait_for(stream_closed_with(db, wid, {topic: 2}), what="the remote stream's cursors")

        await there.append(topic, 3)
        stream = await here.stream(wid)
        recs = await here.records(topic, 2)
        assert await stream.frame() == record_frame(topic, recs, 2, 3, {topic: 2})
        assert await stream.frame() == caught_up_frame(topic, 3, {topic: 3})
        stream.close()
    finally:
        await asyncio.to_thread(proc.stop)
