"""Tombstones on the watch: explicit, never-silent loss with exact inclusive ranges, the reason
recorded for the range (``cap``, ``ttl``, ``mixed``, ``recreated``, ``from_seq_too_old``),
and an ``id`` that already moves the topic's cursor to ``gap_to`` so a resume after it is
correct. Each consumer falls behind with its stream closed, so nothing here races retention."""

from __future__ import annotations

import time

import pytest

from tests.support import wait_for
from watch_service.store import retention

from .conftest import stream_closed_with
from .wire import caught_up_frame, record_frame, tombstone_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]

FUTURE_MS = time.time_ns() // 1_000_000 + 10 * 3600 * 1000


async def consume_then_close(api, db, topic: str, n: int) -> str:
    """A session on ``topic`` whose stream received seqs 1..n and then ended; returns the wid."""
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 1000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    await api.append(topic, *range(n))
    assert await stream.frame() == record_frame(topic, await api.records(topic), 0, n, {topic: 0})
    stream.close()
    await wait_for(stream_closed_with(db, wid, {topic: n}), what="the stream to store its cursor")
    return wid


async def test_cap(api, db):
    topic = await api.topic(max_records=3)
    wid = await consume_then_close(api, db, topic, 1)
    await api.append(topic, *range(7))  # seqs 2..8; the cap keeps 6..8
    stream = await api.stream(wid)
    assert await stream.frame() == tombstone_frame(topic, "cap", 2, 5, 6, 8, {topic: 1})
    assert await stream.frame() == record_frame(topic, await api.records(topic), 5, 8, {topic: 5})
    assert await stream.frame() == caught_up_frame(topic, 8, {topic: 8})
    stream.close()


async def test_ttl(api, db):
    topic = await api.topic(ttl_ms=3_600_000)
    wid = await consume_then_close(api, db, topic, 3)
    await api.append(topic, 4, 5, 6)
    assert [g.as_dict() for g in await retention.trim(db, topic, now_ms=FUTURE_MS)] == [
        {"reason": "ttl", "gap_from": 1, "gap_to": 6}
    ]
    stream = await api.stream(wid)
    assert await stream.frame() == tombstone_frame(topic, "ttl", 4, 6, 7, 6, {topic: 3})
    assert await stream.frame() == caught_up_frame(topic, 6, {topic: 6})
    # Live again: the next record comes right after the gap.
    await api.append(topic, 7)
    assert await stream.frame() == record_frame(topic, await api.records(topic), 6, 7, {topic: 6})
    stream.close()


async def test_mixed(api, db):
    topic = await api.topic(max_records=3, ttl_ms=3_600_000)
    wid = await consume_then_close(api, db, topic, 1)
    await api.append(topic, *range(5))  # seqs 2..6; the cap drops 1..3
    await retention.trim(db, topic, now_ms=FUTURE_MS)  # ttl drops 4..6
    stream = await api.stream(wid)
    assert await stream.frame() == tombstone_frame(topic, "mixed", 2, 6, 7, 6, {topic: 1})
    assert await stream.frame() == caught_up_frame(topic, 6, {topic: 6})
    stream.close()


async def test_recreated(api, db):
    topic = await api.topic()
    wid = await consume_then_close(api, db, topic, 2)
    await api.append(topic, 3, 4, 5)
    await api.delete(topic)
    await api.topic(topic)  # recreated: numbering continues after the old head
    await api.append(topic, 6, 7)
    stream = await api.stream(wid)
    assert await stream.frame() == tombstone_frame(topic, "recreated", 3, 5, 6, 7, {topic: 2})
    assert await stream.frame() == record_frame(topic, await api.records(topic), 5, 7, {topic: 5})
    assert await stream.frame() == caught_up_frame(topic, 7, {topic: 7})
    stream.close()


@pytest.mark.parametrize("from_seq", [0, 1])
async def test_from_seq_too_old_on_connect_and_resume_after_it(api, db, from_seq):
    topic = await api.topic(max_records=2)
    await api.append(topic, *range(5))  # keeps 4..5
    created = await api.watch({"topics": {topic: {"from_seq": from_seq}}, "heartbeat_ms": 1000})
    assert created["topics"][topic] == {"from_seq": from_seq, "head_seq": 5, "earliest_seq": 4}
    stream = await api.stream(created["wid"])
    tomb = tombstone_frame(topic, "from_seq_too_old", from_seq + 1, 3, 4, 5, {topic: from_seq})
    assert await stream.frame() == tomb
    stream.close()
    await wait_for(
        stream_closed_with(db, created["wid"], lambda c: c[topic] >= 3),
        what="the stream to store a cursor past the gap",
    )

    # The tombstone's id already carries gap_to: resuming from it (a rewind if the server
    # went further) gets no second tombstone.
    stream = await api.stream(created["wid"], last_event_id=stream.last_id)
    assert stream.last_id is None
    assert await stream.frame() == record_frame(topic, await api.records(topic), 3, 5, {topic: 3})
    assert await stream.frame() == caught_up_frame(topic, 5, {topic: 5})
    stream.close()
