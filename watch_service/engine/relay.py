"""Appends to a topic from every worker are committed by one worker: the topic's owner.

Appends to a topic serialise on its row lock (invariant L1), and the ``Appender`` merges only
the requests of its own process. With ``serve --workers N`` each worker would send its own
small groups, and their statements would take turns on the lock. So each topic has an owner,
``crc32(topic) % N``; a worker that is not the owner sends the validated records to the owner
over a Unix socket in the supervisor's private folder, where they join the owner's groups, and
gets back the seq range. The worker that took the HTTP request still answers it.

The wire: frames of a 4-byte big-endian length and an orjson array. A request frame holds
``[id, topic, [[data, meta, tag, node], ...]]`` items; a reply frame holds ``[id, result]``
items, ``result`` being ``[first_seq, last_seq, head_seq, ts, earliest_seq]``, ``null`` (the
topic does not exist) or ``{"error": "unavailable" | "internal", "message": ...}``. Whatever a
loop turn gathered goes in one frame, so a burst costs one write and one read per side.

The relay only moves work; it never decides an outcome. When the owner cannot be reached (it
is still starting, or is gone), the worker appends itself, which L1 keeps correct. Requests
under way on a connection that breaks fail as ``unavailable``: whether they committed is
unknown, as with a PostgreSQL connection lost mid-commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

import orjson
import psycopg
import psycopg_pool

from watch_service.protocol.requests import NewRecord
from watch_service.store import topics as store

log = logging.getLogger("auditsync.relay")

_LEN = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024
RETRY_S = 1.0  # an unreachable owner is tried again after this long; meanwhile appends are local


def owner_of(topic: str, workers: int) -> int:
    return zlib.crc32(topic.encode()) % workers


def socket_path(folder: str, index: int) -> str:
    return os.path.join(folder, f"append-{index}.sock")


class _Frames(asyncio.Protocol):
    """Length-prefixed orjson frames in both directions; ``received`` gets each frame's items."""

    def __init__(self, received: Callable[[list], None], lost: Callable[[_Frames], None]):
        self.received, self.lost = received, lost
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.outgoing: list = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        while len(buf) >= 4:
            (size,) = _LEN.unpack_from(buf)
            if size > MAX_FRAME_BYTES:
                log.error("append relay: a frame of %d bytes; closing the connection", size)
                if self.transport is not None:
                    self.transport.close()
                return
            if len(buf) < 4 + size:
                return
            with memoryview(buf) as view:
                items = orjson.loads(view[4 : 4 + size])
            del buf[: 4 + size]
            self.received(items)

    def send(self, item: Any) -> None:
        """Queue ``item``; everything queued in this loop turn leaves in one frame."""
        if not self.outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self.outgoing.append(item)

    def _flush(self) -> None:
        items, self.outgoing = self.outgoing, []
        if not items or self.transport is None or self.transport.is_closing():
            return
        body = orjson.dumps(items)
        self.transport.write(_LEN.pack(len(body)) + body)

    def connection_lost(self, exc) -> None:
        self.lost(self)


class AppendRelay:
    """This worker's side of the relay: the server its peers send to, and its connections to
    them (``elsewhere`` names a topic's owner, ``reach`` connects on first use, ``forward``
    sends)."""

    def __init__(self, appender, index: int, workers: int, folder: str) -> None:
        self.appender, self.index, self.workers, self.folder = appender, index, workers, folder
        self.server: asyncio.AbstractServer | None = None
        self.served: set[_Frames] = set()
        self.serving: set[asyncio.Future] = set()  # peers' appends under way here
        self.peers: dict[int, _Frames] = {}
        self.connecting: dict[int, asyncio.Task] = {}
        self.unreachable_until: dict[int, float] = {}
        self.waiting: dict[int, tuple[str, asyncio.Future]] = {}  # request id -> (topic, reply)
        self.ids = 0
        self.on_forward: Callable[[], None] | None = None  # told of every request sent

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_unix_server(
            self._serve_one, socket_path(self.folder, self.index)
        )

    def _serve_one(self) -> _Frames:
        proto = _Frames(lambda items: self._requests(proto, items), self.served.discard)
        self.served.add(proto)
        return proto

    # -- the owner's side ------------------------------------------------------------------
    def _requests(self, proto: _Frames, items: list) -> None:
        for rid, topic, rows in items:
            records = [NewRecord(*row) for row in rows]
            future = self.appender.submit(topic, records)
            self.serving.add(future)
            future.add_done_callback(functools.partial(self._answer, proto, rid))

    def _answer(self, proto: _Frames, rid: int, future: asyncio.Future) -> None:
        self.serving.discard(future)
        proto.send([rid, _reply(future)])

    # -- the forwarding side ---------------------------------------------------------------
    def elsewhere(self, topic: str) -> int | None:
        """The worker that owns ``topic``, if not this one."""
        owner = owner_of(topic, self.workers)
        return None if owner == self.index else owner

    async def reach(self, owner: int) -> bool:
        """Whether worker ``owner`` can be sent appends, connecting on first use; False while
        it cannot be reached (then this worker appends)."""
        if owner in self.peers:
            return True
        if time.monotonic() < self.unreachable_until.get(owner, 0.0):
            return False
        task = self.connecting.get(owner)
        if task is None:
            task = self.connecting[owner] = asyncio.ensure_future(self._connect(owner))
        # Shared by every request waiting for it: one that is cancelled leaves it running.
        await asyncio.shield(task)
        return owner in self.peers

    def forward(self, owner: int, topic: str, records: list[NewRecord]) -> asyncio.Future:
        """Send the records to ``owner`` (connected by ``reach``); the future gets the
        result as ``Appender.submit``'s would."""
        self.ids += 1
        future = asyncio.get_running_loop().create_future()
        self.waiting[self.ids] = (topic, future)
        self.peers[owner].send([self.ids, topic, [tuple(r) for r in records]])
        if self.on_forward is not None:
            self.on_forward()
        return future

    async def _connect(self, owner: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_unix_connection(
                lambda: _Frames(self._replies, lambda p: self._peer_lost(owner, p)),
                socket_path(self.folder, owner),
            )
            self.peers[owner] = proto
        except OSError as exc:
            self.unreachable_until[owner] = time.monotonic() + RETRY_S
            log.warning("append relay: worker %d unreachable (%s); appending here", owner, exc)
        finally:
            self.connecting.pop(owner, None)

    def _replies(self, items: list) -> None:
        for rid, result in items:
            waiting = self.waiting.pop(rid, None)
            if waiting is None or waiting[1].done():
                continue
            topic, future = waiting
            if result is None:
                future.set_result(None)
            elif isinstance(result, dict):
                if result["error"] == "unavailable":
                    future.set_exception(psycopg.OperationalError(result["message"]))
                else:
                    future.set_exception(RuntimeError(result["message"]))
            else:
                first, last, head, ts, earliest = result
                future.set_result(store.AppendResult(topic, first, last, head, ts, earliest))

    def _peer_lost(self, owner: int, proto: _Frames) -> None:
        if self.peers.get(owner) is proto:
            del self.peers[owner]
        self.unreachable_until[owner] = time.monotonic() + RETRY_S
        lost = psycopg.OperationalError(f"the append relay to worker {owner} was lost")
        for rid, (topic, future) in list(self.waiting.items()):
            if not future.done() and owner_of(topic, self.workers) == owner:
                del self.waiting[rid]
                future.set_exception(lost)

    async def aclose(self, timeout: float = 5.0) -> None:
        """Stop taking peers' appends, answer those under way (within ``timeout``), close."""
        for task in list(self.connecting.values()):
            task.cancel()
        if self.server is not None:
            self.server.close()
        if self.serving:
            await asyncio.wait(list(self.serving), timeout=timeout)
        for proto in self.served:
            proto._flush()  # the answers queued for this loop turn go before the close
        for proto in [*self.peers.values(), *self.served]:
            if proto.transport is not None:
                proto.transport.close()
        if self.server is not None:
            await self.server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path(self.folder, self.index))


def _reply(future: asyncio.Future) -> Any:
    if future.cancelled():
        return {"error": "unavailable", "message": "the owner worker is stopping"}
    exc = future.exception()
    if exc is None:
        r = future.result()
        return None if r is None else [r.first_seq, r.last_seq, r.head_seq, r.ts, r.earliest_seq]
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
        return {"error": "unavailable", "message": str(exc)}
    log.error("append relay: an append for a peer failed", exc_info=exc)
    return {"error": "internal", "message": "internal server error"}
