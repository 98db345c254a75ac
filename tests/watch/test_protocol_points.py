"""Protocol points a black-box run found: ``from_seq`` above the head opens with a ``rewound``
frame (never a silent skip), frames without data carry no meta either, and ``HEAD`` on the stream
route opens no stream."""

from __future__ import annotations

import pytest

from .conftest import session_row
from .wire import SSE, caught_up_frame, record_frame, rewound_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def test_from_seq_above_the_head_opens_with_a_rewound_frame(api):
    """A ``from_seq`` above the head is a cursor the consumer holds that the source no longer
    has (a session re-created after a restore): the stream says so first and moves the cursor
    back to the head, so nothing up to it is skipped."""
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    created = await api.watch({"topics": {topic: {"from_seq": 7}}, "heartbeat_ms": 60000})
    assert created["topics"][topic] == {"from_seq": 7, "head_seq": 3, "earliest_seq": 1}
    stream = await api.stream(created["wid"])
    assert await stream.frame() == rewound_frame(topic, 4, 7, 3, {topic: 3})
    assert await stream.frame() == caught_up_frame(topic, 3, {topic: 3})
    await api.append(topic, 4)
    assert await stream.frame() == record_frame(
        topic, await api.records(topic, 3), 3, 4, {topic: 3}
    )
    stream.close()
    # At the head is fine, and tail ignores from_seq (so its value does not matter).
    at_head = await api.watch({"topics": {topic: {"from_seq": 4}}})
    tail = await api.watch({"topics": {topic: {"from_seq": 99, "tail": True}}})
    assert at_head["topics"][topic]["from_seq"] == tail["topics"][topic]["from_seq"] == 4


async def test_frames_without_data_carry_no_meta_whatever_include_meta_says(api):
    topic = await api.topic()
    await api.append(topic, {"data": {"k": "v"}, "meta": {"m": 1}, "tag": "tg", "node": "n1"})
    recs = await api.records(topic)
    body = {"topics": {topic: {}}, "include_meta": True, "include_data": False}
    stream = await api.stream((await api.watch(body))["wid"])
    raw = await stream.frame()
    assert raw == record_frame(topic, recs, 0, 1, {topic: 0}, meta=False, data=False)
    assert b'"records":[{"$seq":1,"$ts":' in raw and raw.count(b'"$node":"n1"}]') == 1
    assert await stream.frame() == caught_up_frame(topic, 1, {topic: 1})
    stream.close()


async def test_head_on_the_stream_route_is_405_and_opens_nothing(api, service, http, db):
    wid = (await api.watch({"topics": {await api.topic(): {}}}))["wid"]
    async with http.head(f"{service.url}/v0/watch/{wid}", headers=SSE) as r:
        assert r.status == 405 and r.headers["Allow"] == "GET"
        assert r.headers["Content-Type"] == "application/json"
    assert (await session_row(db, wid))["leased"] is False
