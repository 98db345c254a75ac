"""The public Python client, ``watch(url, topics)``, against the real service: typed frames,
a resume after a dropped connection (``Last-Event-ID``) and after the service process restarts
(graceful: no record twice; killed: at least once, from the cursors it had persisted), and a
refusal that ends the watch."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator

import pytest

from watch_service.protocol import cursor as cursor_codec
from watch_service.sink.client import Frame, WatchError, watch

from ..support import ServiceProcess, unique
from ..watch.relay import CuttableRelay

pytestmark = [pytest.mark.e2e, pytest.mark.service]


async def make_topic(http, url: str) -> str:
    topic = unique("api")
    async with http.put(f"{url}/v0/topics/{topic}", json={}) as r:
        assert r.status == 201, await r.text()
    return topic


async def append(http, url: str, topic: str, *values: int) -> None:
    body = {"records": [{"data": {"n": v}} for v in values]}
    async with http.post(f"{url}/v0/topics/{topic}/records", json=body) as r:
        assert r.status == 200, await r.text()


async def until_caught_up(frames: AsyncIterator[Frame], head: int) -> list[Frame]:
    """Data frames up to and including the caught-up at ``head`` (error frames skipped)."""
    got: list[Frame] = []
    async for frame in frames:
        if frame.event == "error":
            continue
        got.append(frame)
        if frame.event == "caught-up" and frame.data["head_seq"] == head:
            return got
    raise AssertionError(f"the watch ended before caught-up at {head}: {got}")


def seqs(frames: list[Frame]) -> list[int]:
    return [r["$seq"] for f in frames if f.event == "record" for r in f.data["records"]]


async def test_typed_frames_and_resume_after_a_dropped_connection(service, http):
    topic = await make_topic(http, service.url)
    await append(http, service.url, topic, 1, 2, 3)
    relay = await CuttableRelay(service.port).start()
    frames = watch(f"http://127.0.0.1:{relay.port}", [topic], heartbeat_ms=1000, backoff_cap_ms=200)
    try:
        first = await asyncio.wait_for(until_caught_up(frames, 3), 20)
        assert [f.event for f in first] == ["record", "caught-up"]
        assert [r["data"] for r in first[0].data["records"]] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert first[1].id == cursor_codec.encode({topic: 3}) and first[1].received_ms > 0

        relay.cut()
        await append(http, service.url, topic, 4, 5)
        second = await asyncio.wait_for(until_caught_up(frames, 5), 20)
        assert seqs(first + second) == [1, 2, 3, 4, 5]
        assert [r.get("last-event-id") for r in relay.stream_requests()] == [
            None,
            cursor_codec.encode({topic: 3}),
        ]
    finally:
        await frames.aclose()
        await relay.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["graceful", "killed"])
async def test_resume_across_a_service_restart(service, http, pg_url, tmp_path, sig):
    # The restarted process persists cursors only when a stream closes (the write-behind
    # flush is an hour away): killed, it resumes from the cursors the session started with.
    proc = ServiceProcess(
        pg_url, env={"AUDITSYNC_CURSOR_FLUSH_MS": "3600000"}, log_path=tmp_path / "service.log"
    )
    await asyncio.to_thread(proc.start)
    topic = await make_topic(http, service.url)
    await append(http, service.url, topic, 1, 2, 3)
    frames = watch(proc.url, [topic], heartbeat_ms=1000, backoff_cap_ms=300, http=http)
    try:
        first = await asyncio.wait_for(until_caught_up(frames, 3), 20)
        assert seqs(first) == [1, 2, 3]
        await asyncio.to_thread(proc.stop, sig)
        await append(http, service.url, topic, 4, 5)  # the same database, another service
        await asyncio.to_thread(proc.start)
        second = await asyncio.wait_for(until_caught_up(frames, 5), 30)
        resent = [] if sig == signal.SIGTERM else [1, 2, 3]
        assert seqs(second) == resent + [4, 5]
        assert second[-1].id == cursor_codec.encode({topic: 5})
    finally:
        await frames.aclose()
        await asyncio.to_thread(proc.stop)


async def test_a_refused_watch_raises(service, http):
    missing = unique("api.missing")
    with pytest.raises(WatchError, match="topic_not_found"):
        async for _ in watch(service.url, [missing], http=http):
            pass
