"""Protocol points a black-box run found: ``from_seq`` above the head is refused (it would skip
every seq up to it), frames without data carry no meta either, and ``HEAD`` on the stream
route opens no stream."""

from __future__ import annotations

import json

import pytest

from .conftest import session_row
from .wire import SSE, caught_up_frame, record_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def test_from_seq_above_the_head_is_400_naming_the_head(api, service, http):
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    async with http.post(f"{service.url}/v0/watch", json={"topics": {topic: {"from_seq": 4}}}) as r:
        assert (r.status, await r.read()) == (
            400,
            json.dumps(
                {
                    "error": {
                        "code": "invalid_request",
                        "message": f"topics[{topic!r}].from_seq: 4 is above the topic's "
                        "head_seq 3; use at most 3, or tail: true",
                    }
                },
                separators=(",", ":"),
            ).encode(),
        )
    # At the head is fine, and tail ignores from_seq (so its value does not matter).
    at_head = await api.watch({"topics": {topic: {"from_seq": 3}}})
    tail = await api.watch({"topics": {topic: {"from_seq": 99, "tail": True}}})
    assert at_head["topics"][topic]["from_seq"] == tail["topics"][topic]["from_seq"] == 3


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
