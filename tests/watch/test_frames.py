"""Exact bytes on the wire for every frame type of the SSE watch, read raw off the socket and
compared with bytes built by hand (seed 002, spec/http-api.md "SSE watch")."""

from __future__ import annotations

import asyncio
import time
from functools import partial

import pytest

from tests.support import unique

from .conftest import Api
from .wire import (
    HEARTBEAT,
    RETRY,
    caught_up_frame,
    compact,
    expect_per_topic,
    frame,
    record_frame,
    topic_deleted_frame,
)

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def test_backlog_caught_up_then_live_record(api):
    topic = await api.topic()
    await api.append(
        topic,
        {
            "data": {"sku": "AEROPRESS-GO", "qty": 1},
            "tag": "order-7731",
            "node": "node-B",
            "meta": {"who": "alice"},
        },
        {"data": {"sku": "FILTER-PACK", "qty": 2}, "node": "node-C"},
        {"data": [1, "two", None]},
    )
    created = await api.watch({"topics": {topic: {}}})
    wid = created["wid"]
    assert wid.startswith("wid_") and len(wid) == 4 + 22
    assert created["stream_url"] == f"/v0/watch/{wid}"
    assert created["topics"] == {topic: {"from_seq": 0, "head_seq": 3, "earliest_seq": 1}}
    assert created["session_ttl_ms"] == 300_000

    stream = await api.stream(wid, read_retry=False)
    recs = await api.records(topic)
    assert await stream.frame() == RETRY
    assert await stream.frame() == record_frame(topic, recs, 0, 3, {topic: 0})
    assert await stream.frame() == caught_up_frame(topic, 3, {topic: 3})

    await api.append(topic, {"data": {"live": True}, "tag": "hidden-without-include_tags"})
    live = await api.records(topic, 3)
    assert await stream.frame() == record_frame(topic, live, 3, 4, {topic: 3})
    stream.close()


async def test_the_id_is_the_full_cursor_map_in_session_topic_order(api):
    # Names of decreasing length: an order-losing store (jsonb sorts keys by length) would
    # put them backwards.
    topics = [
        await api.topic(unique("w.long-topic-name")),
        await api.topic(unique("w.mid")),
        await api.topic(unique("w")),
    ]
    for i, topic in enumerate(topics):
        await api.append(topic, *range(i + 1))
    created = await api.watch({"topics": {t: {} for t in topics}})
    stream = await api.stream(created["wid"])
    expected = {}
    for i, t in enumerate(topics):
        recs = await api.records(t)
        expected[t] = [partial(record_frame, t, recs, 0, i + 1), partial(caught_up_frame, t, i + 1)]
    final = await expect_per_topic(stream, dict.fromkeys(topics, 0), expected)
    assert list(final.items()) == [(t, i + 1) for i, t in enumerate(topics)]
    stream.close()


async def test_caught_up_is_re_emitted_on_each_backlog_to_live_transition(api):
    topic = await api.topic()
    created = await api.watch({"topics": {topic: {}}, "limit": 2})
    stream = await api.stream(created["wid"])
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    await api.append(topic, 1)  # one page: still live, no new caught-up
    assert await stream.frame() == record_frame(topic, await api.records(topic), 0, 1, {topic: 0})
    await api.append(topic, 2, 3, 4, 5, 6)  # three pages of two: a backlog, then live again
    recs = await api.records(topic, 1)
    assert await stream.frames(4) == [
        record_frame(topic, recs[0:2], 1, 6, {topic: 1}),
        record_frame(topic, recs[2:4], 3, 6, {topic: 3}),
        record_frame(topic, recs[4:5], 5, 6, {topic: 5}),
        caught_up_frame(topic, 6, {topic: 6}),
    ]
    stream.close()


async def test_heartbeat_is_a_bare_comment_and_is_suppressed_by_data(api):
    topic = await api.topic()
    created = await api.watch({"topics": {topic: {}}, "heartbeat_ms": 1000})
    stream = await api.stream(created["wid"])
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    t0 = time.monotonic()
    assert await stream.frame(timeout=3) == HEARTBEAT
    first = time.monotonic() - t0
    assert 0.9 <= first <= 2.0, first

    # Data 0.6 s into the next window resets it: the next heartbeat comes a full window after
    # the data, not 0.4 s after it. (The sleep places the append on the time axis under test.)
    await asyncio.sleep(0.6)
    await api.append(topic, "x")
    rec = await stream.frame()
    t1 = time.monotonic()
    assert rec == record_frame(topic, await api.records(topic), 0, 1, {topic: 0})
    assert await stream.frame(timeout=3) == HEARTBEAT
    assert time.monotonic() - t1 >= 0.9
    stream.close()


async def test_topic_deleted_ends_one_topic_while_the_others_go_on(api):
    doomed, other = await api.topic(), await api.topic()
    await api.append(doomed, "a", "b")
    created = await api.watch({"topics": {doomed: {}, other: {}}})
    stream = await api.stream(created["wid"])
    recs = await api.records(doomed)
    cursors = await expect_per_topic(
        stream,
        {doomed: 0, other: 0},
        {
            doomed: [
                partial(record_frame, doomed, recs, 0, 2),
                partial(caught_up_frame, doomed, 2),
            ],
            other: [partial(caught_up_frame, other, 0)],
        },
    )
    assert cursors == {doomed: 2, other: 0}

    assert (await api.delete(doomed))["head_seq"] == 2
    assert await stream.frame() == topic_deleted_frame(doomed, 2, {doomed: 2, other: 0})
    await api.append(other, "still here")
    assert await stream.frame() == record_frame(
        other, await api.records(other), 0, 1, {doomed: 2, other: 0}
    )
    # Terminal for that topic: recreating it and appending sends nothing on this stream.
    await api.topic(doomed)
    await api.append(doomed, "after recreate")
    await api.append(other, "next")
    assert await stream.frame() == record_frame(
        other, await api.records(other, 1), 1, 2, {doomed: 2, other: 1}
    )
    stream.close()


async def test_topic_deleted_with_unread_backlog_reports_the_head(api):
    topic = await api.topic()
    created = await api.watch({"topics": {topic: {}}})
    stream = await api.stream(created["wid"])
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    stream.close()
    await api.append(topic, 1, 2, 3)
    await api.delete(topic)
    stream = await api.stream(created["wid"])
    assert await stream.frame() == topic_deleted_frame(topic, 3, {topic: 0})
    stream.close()


async def test_shutdown_ends_open_streams_with_an_error_frame(make_service, http):
    svc = await make_service()
    api = Api(http, svc.url)
    topic = await api.topic()
    created = await api.watch({"topics": {topic: {}}})
    stream = await api.stream(created["wid"])
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    stopping = asyncio.create_task(svc.stop())
    assert await stream.frame() == frame(
        "error",
        compact({"code": "unavailable", "message": "the service is shutting down; reconnect"}),
        None,
    )
    await stream.closed()
    await stopping
