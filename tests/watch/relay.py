"""A TCP relay for tests: it logs the bytes clients send (so a test sees the exact request
headers, e.g. the ``Last-Event-ID`` a browser's EventSource adds on its own), and it can cut
every connection at once, which is a network drop as the client sees it."""

from __future__ import annotations

import asyncio
import re


class CuttableRelay:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sent = bytearray()
        self.pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self.port = 0

    async def start(self) -> CuttableRelay:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:  # the service is down: the client sees its connection fail
            cw.transport.abort()
            return
        self.pairs.append((cw, uw))

        async def pipe(r, w, log: bytearray | None) -> None:
            try:
                while data := await r.read(65536):
                    if log is not None:
                        log += data
                    w.write(data)
                    await w.drain()
            except ConnectionError:
                pass
            finally:
                w.transport.abort()

        await asyncio.gather(pipe(cr, uw, self.sent), pipe(ur, cw, None))

    def stream_requests(self) -> list[dict[str, str]]:
        """The headers (names lower-cased) of every ``GET /v0/watch/…`` sent so far."""
        heads = re.findall(rb"GET /v0/watch/\S+ HTTP/1.1\r\n(.*?)\r\n\r\n", bytes(self.sent), re.S)
        return [
            {k.lower(): v for k, v in (line.split(": ", 1) for line in h.decode().split("\r\n"))}
            for h in heads
        ]

    def cut(self) -> None:
        for cw, uw in self.pairs:
            cw.transport.abort()
            uw.transport.abort()
        self.pairs.clear()

    async def stop(self) -> None:
        self.cut()
        self.server.close()
        await self.server.wait_closed()
