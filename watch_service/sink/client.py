"""The SSE client of the watch service: one implementation, used by the sink, by
``auditsync watch`` and by your own code.

The public API is :func:`watch`, an async iterator of typed :class:`Frame` objects::

    import asyncio
    from watch_service.sink.client import watch

    async def main() -> None:
        async for frame in watch("http://127.0.0.1:8400", ["orders"], from_seq=0):
            if frame.event == "record":
                for record in frame.data["records"]:
                    print(record["$seq"], record["data"])
            elif frame.event == "caught-up":
                print("live at", frame.data["head_seq"])

    asyncio.run(main())

Frames are ``record``, ``tombstone``, ``rewound``, ``caught-up``, ``topic-deleted`` and ``error``
(``rewound``: the source went back and will write ``gap_from..gap_to`` again; replace what you
hold of them with what comes next, its id already moved the cursor back); ``data`` is
the parsed JSON body and ``id`` the composite cursor id in force (pass the last one you have
processed as ``last_event_id`` to continue where you stopped). Delivery is at least once: after a
service restart a record may come again (its ``$seq`` is at or below one already seen).

Reconnecting (one behaviour for every user of this module):

- the stream is resumed on the same session with ``Last-Event-ID`` set to the id of the last
  frame the caller consumed; a session the server reclaimed (404, or an ``error`` frame with
  code ``not_found``) is re-created from those positions, then resumed;
- the delay before a reconnect starts from the server's ``retry:`` (``RETRY_MS`` until it sends
  one), doubles with each attempt that delivers no frame, is capped (``backoff_cap_ms``) and
  jittered ("equal jitter": between half and all of it, see ``backoff.backoff_ms``); a
  connection that delivered a frame resets it;
- silence longer than 2 × heartbeat + ``watchdog_slack_ms`` (a heartbeat comes every
  ``heartbeat_ms``) counts as a dropped connection; an ``error`` frame ends the connection too;
- 400, 401, 403 and 406 end the watch (:class:`WatchError`), as does an unknown topic unless
  ``wait_for_topics`` asks to wait for it to be created; any other failure is retried.

:class:`WatchClient` is the same machinery one level down, for the sink and the CLI: its
``items`` also reports sessions, connections, heartbeats, idle ticks and disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

import aiohttp
import orjson

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.payloads import PayloadError, loads_exact
from watch_service.sink.backoff import RETRY_MS, backoff_ms
from watch_service.sink.connection import (
    Chunk,
    ClientItem,
    Disconnected,
    Frame,
    Heartbeat,
    Idle,
    Opened,
    QueueItem,
    SessionError,
    WatchOptions,
    create_session,
    error_code,
    pump,
)
from watch_service.sink.sse import Comment, Event, Retry

T = TypeVar("T")
QUEUE_CHUNKS = 64  # chunks read ahead of the consumer, at most


class WatchError(AuditsyncError):
    """The server refused the watch for good (bad request or key, forbidden or unknown topic)."""


class WatchClient:
    """The reconnecting watch loop. ``items`` yields what happens; between two items nothing
    moves, so a caller can make its state durable on :class:`Disconnected` before the
    reconnect that follows sends ``Last-Event-ID``.

    ``resume`` gives where the caller durably stands: a new session starts there and each GET
    sends it as ``Last-Event-ID`` (default: the id of the last frame consumed);
    ``drop(reason)`` ends the current connection after the frame just yielded, which then
    counts as not consumed; ``stop()`` ends ``items`` at its next wait.
    """

    def __init__(
        self,
        opts: WatchOptions,
        *,
        wid: str | None = None,
        last_event_id: str = "",
        resume: Callable[[], Mapping[str, int]] | None = None,
        idle_s: Callable[[], float] | None = None,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.opts, self.wid, self.last_event_id = opts, wid, last_event_id or ""
        self.retry_ms = RETRY_MS
        self._resume, self._idle_s, self._draw = resume, idle_s, draw
        self._stopping = asyncio.Event()
        self._queue: asyncio.Queue[QueueItem] | None = None
        self._drop: str | None = None

    def stop(self) -> None:
        self._stopping.set()
        if self._queue is not None:
            # Wake a reader waiting on a quiet stream; a full queue means it is not waiting.
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(Disconnected("stopping"))

    def drop(self, reason: str) -> None:
        self._drop = reason

    async def items(self, http: aiohttp.ClientSession) -> AsyncGenerator[ClientItem, None]:
        attempt = 0
        while not self._stopping.is_set():
            if self.wid is None:
                try:
                    opened = await self._unless_stopped(self._open(http))
                except SessionError as exc:
                    yield Disconnected(str(exc), fatal=exc.fatal)
                    if exc.fatal:
                        return
                    attempt += 1
                    await self._pause(attempt)
                    continue
                if opened is None:
                    return
                yield opened
            ended, healthy = Disconnected("stopping"), False
            async with contextlib.aclosing(self._connection(http)) as connection:
                async for item in connection:
                    if isinstance(item, Frame) and item.event != "error":
                        healthy = True
                    if isinstance(item, Disconnected):
                        ended = item
                    yield item
            if ended.fatal or self._stopping.is_set():
                return
            if ended.session_gone:
                self.wid = None
            attempt = 0 if healthy else attempt + 1
            await self._pause(attempt)

    async def _open(self, http: aiohttp.ClientSession) -> Opened:
        resume = self._resume() if self._resume else cursor_codec.decode(self.last_event_id)
        wid, start = await create_session(http, self.opts, resume)
        self.wid = wid  # the last id, if any, holds the positions it started from
        return Opened(wid, start)

    async def _connection(self, http: aiohttp.ClientSession) -> AsyncGenerator[ClientItem, None]:
        """One GET: its items, ending with one :class:`Disconnected` (none when stopped)."""
        assert self.wid is not None
        if self._resume is not None:
            resume = dict(self._resume())
            self.last_event_id = cursor_codec.encode(resume) if resume else self.last_event_id
        queue: asyncio.Queue[QueueItem] = asyncio.Queue(maxsize=QUEUE_CHUNKS)
        self._queue = queue
        reader = asyncio.create_task(pump(http, self.opts, self.wid, self.last_event_id, queue))
        try:
            while not self._stopping.is_set():
                item = await self._next(queue)
                if self._stopping.is_set():
                    return
                for out in self._outs(item):
                    yield out
                    ended = out if isinstance(out, Disconnected) else self._after(out)
                    if ended is not None:
                        if ended is not out:
                            yield ended
                        return
        finally:
            self._queue = None
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    def _outs(self, item: QueueItem | Idle) -> list[ClientItem]:
        if not isinstance(item, Chunk):
            return [item]
        outs = (self._translate(it, item.received_ms) for it in item.items)
        return [out for out in outs if out is not None]

    def _translate(self, it: object, received_ms: int) -> Frame | Heartbeat | Disconnected | None:
        """What one parsed SSE item means to the caller (None: nothing; ``retry:`` is ours)."""
        if isinstance(it, Retry):
            self.retry_ms = it.ms
            return None
        if isinstance(it, Comment):
            return Heartbeat()
        if isinstance(it, Event):
            try:
                # Exact numbers: the landing text re-encoded from it is the stored text.
                return Frame(it.type, loads_exact(it.data), it.id, received_ms)
            except PayloadError:
                return Disconnected(f"protocol: {it.type} frame data is not JSON")
        return None

    def _after(self, item: ClientItem) -> Disconnected | None:
        """Once the caller has taken ``item``: the end of this connection, if it is one."""
        if self._drop is not None:
            reason, self._drop = self._drop, None
            return Disconnected(reason)
        if isinstance(item, Frame):
            if item.event == "error":
                return Disconnected(
                    f"error frame: {orjson.dumps(item.data).decode()}",
                    session_gone=error_code(item.data) == "not_found",
                )
            if item.id:
                self.last_event_id = item.id
        return None

    async def _next(self, queue: asyncio.Queue[QueueItem]) -> QueueItem | Idle:
        with contextlib.suppress(asyncio.QueueEmpty):
            return queue.get_nowait()
        if self._idle_s is None:
            return await queue.get()
        with contextlib.suppress(asyncio.TimeoutError):
            return await asyncio.wait_for(queue.get(), self._idle_s())
        return Idle()

    async def _pause(self, attempt: int) -> None:
        delay = backoff_ms(attempt, self.retry_ms, self.opts.backoff_cap_ms, self._draw()) / 1000
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay)

    async def _unless_stopped(self, work: Awaitable[T]) -> T | None:
        """Await ``work`` unless a stop comes first (then cancel it and return None)."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        for pending in (stop, task):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
        return None if task.cancelled() else task.result()


async def watch(
    url: str,
    topics: Iterable[str],
    *,
    from_seq: int = 0,
    tail: bool = False,
    key: str | None = None,
    node: str | None = None,
    heartbeat_ms: int = 15_000,
    consistency: str | None = None,
    include_data: bool = True,
    last_event_id: str = "",
    wid: str | None = None,
    backoff_cap_ms: int = 30_000,
    wait_for_topics: bool = False,
    http: aiohttp.ClientSession | None = None,
) -> AsyncGenerator[Frame, None]:
    """Watch ``topics`` and yield every frame, reconnecting as the module docstring says.

    ``from_seq`` delivers seqs after it, ``tail`` only records appended from now on; ``key`` is
    the bearer key; ``node`` filters out that node's own records; ``wid`` opens an existing
    session. Raises :class:`WatchError` when the server refuses the watch for good. Stop by
    leaving the ``async for`` loop.
    """
    opts = WatchOptions(
        url.rstrip("/"),
        tuple(topics),
        from_seq=from_seq,
        tail=tail,
        node=node,
        key=key,
        heartbeat_ms=heartbeat_ms,
        consistency=consistency,
        include_data=include_data,
        backoff_cap_ms=backoff_cap_ms,
        wait_for_topics=wait_for_topics,
    )
    client = WatchClient(opts, wid=wid, last_event_id=last_event_id)
    async with contextlib.AsyncExitStack() as stack:
        if http is None:
            http = await stack.enter_async_context(aiohttp.ClientSession())
        async with contextlib.aclosing(client.items(http)) as items:
            async for item in items:
                if isinstance(item, Frame):
                    yield item
                elif isinstance(item, Disconnected) and item.fatal:
                    raise WatchError(item.reason)


__all__ = ["ClientItem", "Frame", "WatchClient", "WatchError", "WatchOptions", "watch"]
