"""No unbounded buffers: a client that stops reading is disconnected once a write has waited
``write_timeout_s``, and later resumes without loss from the ``Last-Event-ID`` of the last
frame it processed. The slow client is a raw socket with a tiny receive buffer."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from tests.support import wait_for
from watch_service.web.app_keys import STREAMS

from .conftest import Api, session_row
from .wire import RETRY, caught_up_frame, fields, record_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]


class RawSseClient:
    """HTTP/1.1 by hand over a socket whose receive buffer is as small as the kernel allows;
    asyncio's reader is capped too, so once the test stops reading, the server's writes back
    up into its own buffers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.body = bytearray()  # de-chunked bytes not yet taken as frames
        self.local: tuple = ()

    @classmethod
    async def open(cls, port: int, path: str) -> RawSseClient:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Accept: text/event-stream\r\n\r\n".encode()
        )
        client = cls(reader, writer)
        client.local = sock.getsockname()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
        assert b"\r\nTransfer-Encoding: chunked\r\n" in head
        return client

    async def _chunk(self) -> bool:
        size_line = await self.reader.readuntil(b"\r\n")
        size = int(size_line.strip(), 16)
        self.body += await self.reader.readexactly(size)
        await self.reader.readexactly(2)
        return size > 0

    async def frame(self, timeout: float = 10.0) -> bytes:
        async with asyncio.timeout(timeout):
            while (end := self.body.find(b"\n\n")) < 0:
                if not await self._chunk():
                    raise EOFError("the stream ended")
        raw = bytes(self.body[: end + 2])
        del self.body[: end + 2]
        return raw

    async def drain_to_close(self, timeout: float = 10.0) -> int:
        """Read and drop everything until the server closes the connection; returns bytes."""
        total = 0
        async with asyncio.timeout(timeout):
            try:
                while chunk := await self.reader.read(1 << 16):
                    total += len(chunk)
            except ConnectionResetError:
                pass
        return total

    def close(self) -> None:
        self.writer.close()


async def test_a_client_that_stops_reading_is_cut_off_and_resumes_without_loss(
    make_service, http, db
):
    svc = await make_service(write_timeout_s=0.5)
    api = Api(http, svc.url)
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    slow = await RawSseClient.open(svc.port, f"/v0/watch/{wid}")
    assert await slow.frame() == RETRY
    assert await slow.frame() == record_frame(topic, await api.records(topic), 0, 3, {topic: 0})
    processed = await slow.frame()
    assert processed == caught_up_frame(topic, 3, {topic: 3})
    last_id = fields(processed)["id"]

    # The client stops reading. ~12 MB of records cannot all fit in socket buffers.
    payload = "p" * 100_000
    for _ in range(12):
        await api.append(topic, *[payload] * 10)
    head = 3 + 120

    async def stream_ended() -> bool:
        row = await session_row(db, wid)
        return not row["leased"]

    await wait_for(stream_ended, timeout=15, what="the server to give up on the slow client")
    assert not svc.app[STREAMS]
    stored = (await session_row(db, wid))["cursors"][topic]
    assert 3 <= stored < head  # it could not have written everything

    # Disconnected without the client reading another byte: the server holds no connection
    # (nor its buffered frames) for it.
    def still_connected() -> bool:
        return any(
            h.transport is not None
            and not h.transport.is_closing()
            and h.transport.get_extra_info("peername") == slow.local
            for h in svc.runner.server.connections
        )

    await wait_for(
        lambda: not still_connected(), timeout=5, what="the server to drop the connection"
    )
    await slow.drain_to_close()
    slow.close()

    # Resume from the last frame the client processed: every seq after it, once, in order.
    stream = await api.stream(wid, last_event_id=last_id)
    seqs = []
    while not seqs or seqs[-1] < head:
        f = fields(await stream.frame())
        assert f["event"] == "record"
        seqs += [r["$seq"] for r in json.loads(f["data"])["records"]]
    assert seqs == list(range(4, head + 1))
    stream.close()
