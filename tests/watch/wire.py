"""The SSE watch from a client's side, written independently of the service's encoders:
expected frame bytes built by hand, and raw frames read off the socket one at a time.

Nothing here parses what it compares: a test builds the exact bytes it expects with these
builders and compares them with the bytes read, so an encoder bug cannot hide behind a
shared helper.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Callable

import aiohttp

SSE = {"Accept": "text/event-stream"}
MAX_FRAME = 32 * 1024 * 1024
RETRY = b"retry: 2000\n\n"
HEARTBEAT = b": hb\n\n"
HEADERS_TIMEOUT_S = 30.0  # a stream open answers its headers within this, or the test fails


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def cursor_id(cursors: dict[str, int]) -> str:
    """base64url, unpadded, of the compact JSON map in the given (session) topic order."""
    return base64.urlsafe_b64encode(compact(cursors).encode()).rstrip(b"=").decode()


def decode_id(frame_id: str) -> dict[str, int]:
    return json.loads(base64.urlsafe_b64decode(frame_id + "=" * (-len(frame_id) % 4)))


def frame(event: str, data: str, cursors: dict[str, int] | None) -> bytes:
    head = f"id: {cursor_id(cursors)}\n" if cursors is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n".encode()


def wire_record(rec: dict, *, meta: bool = True, tags: bool = False, data: bool = True) -> str:
    """One record as the frame carries it, from a Records API record (which always has
    ``$tag``/``meta`` when set): ``$seq, $ts, $tag?, $node?, meta?, data?`` in that order."""
    parts = [f'"$seq":{rec["$seq"]}', f'"$ts":{rec["$ts"]}']
    if tags and "$tag" in rec:
        parts.append(f'"$tag":{compact(rec["$tag"])}')
    if "$node" in rec:
        parts.append(f'"$node":{compact(rec["$node"])}')
    if meta and "meta" in rec:
        parts.append(f'"meta":{compact(rec["meta"])}')
    if data:
        parts.append(f'"data":{compact(rec["data"])}')
    return "{" + ",".join(parts) + "}"


def record_frame(
    topic: str,
    records: list[dict],
    from_seq: int,
    head_seq: int,
    cursors: dict[str, int],
    to_seq: int | None = None,
    **flags: bool,
) -> bytes:
    """The record frame for ``records`` of ``topic``; ``cursors`` is the map *before* it.
    ``to_seq`` defaults to the last record's seq (node-filtered records can move it on)."""
    to_seq = records[-1]["$seq"] if to_seq is None else to_seq
    encoded = ",".join(wire_record(r, **flags) for r in records)
    body = (
        f'{{"topic":{compact(topic)},"records":[{encoded}],'
        f'"from_seq":{from_seq},"to_seq":{to_seq},"head_seq":{head_seq}}}'
    )
    return frame("record", body, {**cursors, topic: to_seq})


def caught_up_frame(topic: str, head_seq: int, cursors: dict[str, int]) -> bytes:
    return frame("caught-up", f'{{"topic":{compact(topic)},"head_seq":{head_seq}}}', cursors)


def tombstone_frame(
    topic: str,
    reason: str,
    gap_from: int,
    gap_to: int,
    earliest_seq: int,
    head_seq: int,
    cursors: dict[str, int],
) -> bytes:
    body = (
        f'{{"topic":{compact(topic)},"reason":"{reason}","gap_from":{gap_from},'
        f'"gap_to":{gap_to},"earliest_seq":{earliest_seq},"head_seq":{head_seq}}}'
    )
    return frame("tombstone", body, {**cursors, topic: gap_to})


def rewound_frame(
    topic: str, gap_from: int, gap_to: int, head_seq: int, cursors: dict[str, int]
) -> bytes:
    """The frame of a source that went back: ``cursors`` is the map *after* it."""
    body = (
        f'{{"topic":{compact(topic)},"reason":"source_rewound","gap_from":{gap_from},'
        f'"gap_to":{gap_to},"head_seq":{head_seq}}}'
    )
    return frame("rewound", body, cursors)


def checkpoint_id(cursors: dict[str, int]) -> str:
    """A checkpoint token for ``cursors`` (session topic order): ``ck.`` + base64url(6-byte
    fingerprint of the topic list, width, big-endian seqs of that width)."""
    width = next(w for w in (1, 2, 4, 8) if max(cursors.values()) < 1 << (8 * w))
    body = hashlib.sha256("\n".join(cursors).encode()).digest()[:6] + bytes([width])
    body += b"".join(seq.to_bytes(width, "big") for seq in cursors.values())
    return "ck." + base64.urlsafe_b64encode(body).rstrip(b"=").decode()


def topic_deleted_frame(topic: str, head_seq: int, cursors: dict[str, int]) -> bytes:
    body = f'{{"topic":{compact(topic)},"head_seq":{head_seq},"reason":"deleted"}}'
    return frame("topic-deleted", body, {**cursors, topic: max(cursors[topic], head_seq)})


def fields(raw: bytes) -> dict[str, str]:
    """The ``id``/``event``/``data`` fields of one raw frame (for picking, never for asserting)."""
    out = {}
    for line in raw.decode().split("\n"):
        name, sep, value = line.partition(": ")
        if sep and name in ("id", "event", "data", "retry"):
            out[name] = value
    return out


Expectation = Callable[[dict[str, int]], bytes]


async def expect_per_topic(
    stream: Stream, cursors: dict[str, int], expected: dict[str, list[Expectation]]
) -> dict[str, int]:
    """Read frames until every topic's expected frames have arrived. Topics may interleave in
    any order (the server picks which topic drains next), but each frame must equal its topic's
    next expectation built from the cursor map at that moment. Returns the final map."""
    pending = {t: list(v) for t, v in expected.items() if v}
    while pending:
        raw = await stream.frame()
        topic = json.loads(fields(raw)["data"])["topic"]
        assert topic in pending, f"unexpected frame {raw!r}"
        assert raw == pending[topic].pop(0)(cursors)
        cursors = decode_id(fields(raw)["id"])
        if not pending[topic]:
            del pending[topic]
    return cursors


class Stream:
    """One open ``GET /v0/watch/{wid}`` read raw, frame by frame.

    A task keeps reading the body into a buffer as it arrives: aiohttp's reads raise a
    connection error *before* returning data already buffered, which would lose the frames a
    server sends just before it closes (the shutdown ``error`` frame)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.last_id: str | None = None
        self.buffer = bytearray()
        self.ended: str | None = None  # "eof" or the error that ended the body
        self._arrived = asyncio.Event()
        self._pump_task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        try:
            while chunk := await self.resp.content.readany():
                self.buffer += chunk
                self._arrived.set()
            self.ended = "eof"
        except (aiohttp.ClientError, ConnectionError) as exc:
            self.ended = repr(exc)
        finally:
            self._arrived.set()

    async def frame(self, timeout: float = 10.0) -> bytes:
        async with asyncio.timeout(timeout):
            while (end := self.buffer.find(b"\n\n")) < 0:
                if self.ended is not None:
                    raise EOFError(
                        f"stream ended ({self.ended}); left {bytes(self.buffer[:200])!r}"
                    )
                self._arrived.clear()
                await self._arrived.wait()
        raw = bytes(self.buffer[: end + 2])
        del self.buffer[: end + 2]
        frame_id = fields(raw).get("id")
        if frame_id is not None:
            self.last_id = frame_id
        return raw

    async def frames(self, n: int, timeout: float = 10.0) -> list[bytes]:
        return [await self.frame(timeout) for _ in range(n)]

    async def closed(self, timeout: float = 10.0) -> None:
        """Wait until the server ends the stream (clean EOF or abort) with no frame unread."""
        async with asyncio.timeout(timeout):
            while self.ended is None:
                self._arrived.clear()
                await self._arrived.wait()
        assert self.buffer == b"", bytes(self.buffer)

    def close(self) -> None:
        self._pump_task.cancel()
        self.resp.close()


async def create(
    http: aiohttp.ClientSession, url: str, body: dict, headers: dict | None = None
) -> dict:
    async with http.post(f"{url}/v0/watch", json=body, headers=headers) as r:
        doc = await r.json()
        assert r.status == 200, doc
        return doc


async def open_stream(
    http: aiohttp.ClientSession,
    url: str,
    wid: str,
    *,
    last_event_id: str | None = None,
    headers: dict | None = None,
    query: str = "",
    read_retry: bool = True,
) -> Stream:
    hdrs = {**SSE, **(headers or {})}
    if last_event_id is not None:
        hdrs["Last-Event-ID"] = last_event_id
    try:  # bounded: a stream open the server never answers fails here, not at pytest-timeout
        async with asyncio.timeout(HEADERS_TIMEOUT_S):
            resp = await http.get(f"{url}/v0/watch/{wid}{query}", headers=hdrs)
    except TimeoutError:
        raise AssertionError(
            f"GET {url}/v0/watch/{wid}: no response headers within {HEADERS_TIMEOUT_S:g} s"
        ) from None
    if resp.status != 200:
        body = await resp.text()
        resp.close()
        raise AssertionError(f"GET /v0/watch/{wid}: {resp.status} {body}")
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["X-Accel-Buffering"] == "no"
    stream = Stream(resp)
    if read_retry:
        assert await stream.frame() == RETRY
    return stream
