"""A load generator's HTTP client: kept-alive raw HTTP/1.1, for the benchmarks that drive the
service's append route (``append.py``, ``watch.py``)."""

from __future__ import annotations

import asyncio
import re


class RawClient:
    """One kept-alive HTTP/1.1 connection sending pre-encoded requests and reading each answer
    (status line, Content-Length, body). A load generator that costs a fraction of a full
    client's CPU, so the machine's cores go to the service and PostgreSQL being measured."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, url: str) -> RawClient:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}")

    def post_request(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def call(self, request: bytes) -> bytes:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = _CONTENT_LENGTH.search(head)
        if length is None:
            raise RuntimeError(f"answer without Content-Length: {head!r}")
        body = await self.reader.readexactly(int(length[1]))
        if head[9:12] != b"200":
            raise RuntimeError(f"append failed: {head[:12]!r} {body[:300]!r}")
        return body

    def close(self) -> None:
        self.writer.close()


_CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *([0-9]+)")
