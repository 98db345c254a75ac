"""The start-up handshake between ``serve``'s supervisor and its workers, over two pipes per
worker: the worker says ``STARTED`` once its app (pool, gRPC servers) is up, waits for ``GO``,
serves the HTTP socket it inherited, and says ``LISTENING``. The supervisor makes the socket
listen between the two, so the port answers only once every surface does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os

STARTED, GO, LISTENING = b"started\n", b"go\n", b"listening\n"


class WorkerChannel:
    """The supervisor's two pipes to one starting worker: the lines it says, and the one line
    that lets it serve the port."""

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.BaseTransport, go_fd: int):
        self.reader, self.transport, self.go_fd = reader, transport, go_fd

    @classmethod
    async def open(cls, ready_fd: int, go_fd: int) -> WorkerChannel:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(ready_fd, "rb", buffering=0)
        )
        return cls(reader, transport, go_fd)

    async def said(self, line: bytes) -> bool:
        """True once the worker says ``line``; False when it closes the pipe first."""
        return (await self.reader.readline()) == line

    def go(self) -> None:
        os.write(self.go_fd, GO)

    def close(self) -> None:
        self.transport.close()
        with contextlib.suppress(OSError):
            os.close(self.go_fd)


@dataclasses.dataclass(frozen=True)
class WorkerFds:
    """What a worker inherits: its pipes to the supervisor and the bound HTTP socket."""

    ready: int
    go: int
    listen: int


async def read_line(fd: int) -> bytes:
    """One line from the pipe ``fd`` (empty at its end); the pipe is closed."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        return await reader.readline()
    finally:
        transport.close()
