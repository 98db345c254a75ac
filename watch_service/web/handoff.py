"""A kept-alive connection that appends to a topic another worker owns is passed to that worker.

Under ``serve --workers N`` a topic's appends are committed by the worker that owns it
(``engine/relay``); an append that reaches another worker goes to the owner and back, a hop
each way, and a client that keeps writing that topic on its connection would pay the hops on
every request. So once such an append is answered, the worker passes the connection itself to
the owner: its socket goes over ``SCM_RIGHTS`` on a Unix datagram socket in the supervisor's
private folder, and the owner serves the connection's next requests as if it had accepted it.
The client sees nothing: the same TCP connection, answered by another process.

Only a connection with nothing half-done is passed: the request's body read whole, the answer
written out, no byte of a next request received (``ContractRequestHandler`` keeps track), and
keep-alive on. A connection is passed at most once, so one that writes topics of several owners
settles where it lands second. A connection that cannot be passed (or an owner that cannot be
reached) stays, and its appends keep going through the relay.

A watch stream whose topics one other worker owns is passed too, before it starts: with its
request, whose bytes go in the same datagram and which the owner then serves as if it had read
them itself. The owner's tailer is the one its appends reach first (``Tailer.offer``), so the
stream's records are pushed by the process that committed them, and a worker with no stream of
a topic is not woken by its appends at all.

Each worker sends on one connected datagram socket per peer. A peer's queue holds a few
datagrams (``net.unix.max_dgram_qlen``, 10 by default), so a burst of streams opening at once
(a fleet of watchers reconnecting) fills it while the peer's loop is busy; a stream then waits
for room (``writable``: the connected socket polls writable once the peer's queue has room),
up to ``serving.PASS_WAIT_S``, rather than staying where it landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("auditsync.handoff")

# The owner a request's connection should go to, set by the append route.
HANDOFF_TO = web.RequestKey("handoff_to", int)
# Set on a request passed to another worker unanswered: that worker answers and counts it.
PASSED = web.RequestKey("passed", bool)
MAX_REPLAY = 64 * 1024  # request bytes a passed connection may carry (a header's bound)


def socket_path(folder: str, index: int) -> str:
    return os.path.join(folder, f"connections-{index}.sock")


class ConnectionHandoff:
    """This worker's end: the datagram socket where peers' connections arrive, and ``send``."""

    def __init__(self, index: int, folder: str) -> None:
        self.index, self.folder = index, folder
        self.inbox: socket.socket | None = None
        self.peers: dict[int, socket.socket] = {}  # connected to each peer's inbox, on first use
        self.full: set[int] = set()  # peers whose queue had no room at the last send
        self._room: dict[int, asyncio.Future[None]] = {}  # ``writable``'s waits, one a peer
        self.closed = False
        # The aiohttp server whose handlers serve adopted connections (set once serving).
        self.handler_factory: Callable[[], Any] | None = None
        self.adopting: set[asyncio.Task] = set()
        self.on_sent: Callable[[], None] | None = None  # told of every connection passed

    def start(self) -> None:
        self.inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.inbox.bind(socket_path(self.folder, self.index))
        self.inbox.setblocking(False)
        asyncio.get_running_loop().add_reader(self.inbox.fileno(), self._receive)

    def _peer(self, owner: int) -> socket.socket | None:
        """The socket connected to worker ``owner``'s inbox; None while it is not there."""
        peer = self.peers.get(owner)
        if peer is None and not self.closed:
            peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            peer.setblocking(False)
            try:
                peer.connect(socket_path(self.folder, owner))
            except OSError as exc:  # not bound yet, or gone
                log.debug("worker %d cannot be reached: %s", owner, exc)
                peer.close()
                return None
            self.peers[owner] = peer
        return peer

    def send(self, sock: Any, owner: int, replay: bytes = b"") -> bool:
        """Pass the connection ``sock`` to worker ``owner``, with ``replay``: bytes read from
        it that the owner serves as the connection's first (a request this worker did not
        answer); False if it cannot take it (then the connection stays here, untouched)."""
        self.full.discard(owner)
        if len(replay) > MAX_REPLAY or (peer := self._peer(owner)) is None:
            return False
        try:
            socket.send_fds(peer, [b"c" + replay], [sock.fileno()])
        except BlockingIOError:  # its queue is full: ``writable`` waits for room
            self.full.add(owner)
            return False
        except OSError as exc:  # gone: connected again on the next send
            log.debug("connection not passed to worker %d: %s", owner, exc)
            self._forget(owner)
            return False
        if self.on_sent is not None:
            self.on_sent()
        return True

    async def writable(self, owner: int) -> None:
        """Until worker ``owner``'s queue has room. Every waiter for one peer shares one
        poll of its socket; a waiter cancelled leaves it to the others (or to fire once,
        unwatched, and remove itself)."""
        peer = self.peers.get(owner)
        if peer is None or self.closed:
            return
        room = self._room.get(owner)
        if room is None or room.done():
            loop = asyncio.get_running_loop()
            room = self._room[owner] = loop.create_future()
            fd = peer.fileno()

            def ready() -> None:
                loop.remove_writer(fd)
                if not room.done():
                    room.set_result(None)

            loop.add_writer(fd, ready)
        await asyncio.shield(room)

    def _forget(self, owner: int) -> None:
        """Close the socket to ``owner``; its waiters try once more (and find no socket)."""
        peer = self.peers.pop(owner)
        room = self._room.pop(owner, None)
        if room is not None and not room.done():
            asyncio.get_running_loop().remove_writer(peer.fileno())
            room.set_result(None)
        peer.close()

    def _receive(self) -> None:
        assert self.inbox is not None
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.inbox, 1 + MAX_REPLAY, 16)
            except (BlockingIOError, InterruptedError):
                return
            for fd in fds:  # one a message
                self._adopt(socket.socket(fileno=fd), message[1:])

    def _adopt(self, sock: socket.socket, replay: bytes) -> None:
        factory = self.handler_factory
        if factory is None:  # not serving (yet, or any more): the client reconnects
            sock.close()
            return
        sock.setblocking(False)

        def handler() -> Any:
            protocol = factory()
            protocol.keep_here(replay)  # passed once: never again
            return protocol

        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(loop.connect_accepted_socket(handler, sock))
        self.adopting.add(task)
        task.add_done_callback(self._adopted)

    def _adopted(self, task: asyncio.Task) -> None:
        self.adopting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a passed connection could not be served: %s", task.exception())

    async def aclose(self) -> None:
        self.handler_factory = None
        if self.inbox is not None:
            asyncio.get_running_loop().remove_reader(self.inbox.fileno())
            self.inbox.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(socket_path(self.folder, self.index))
        self.closed = True
        for owner in list(self.peers):
            self._forget(owner)
        for task in list(self.adopting):
            task.cancel()
