"""The sink's connection loop: session → stream → spool → reconnect.

It keeps one watch session (its wid persisted in the sink state, reused after a restart,
re-created with the persisted cursors when the server answers 404 or an ``error`` frame says
``not_found``), reads the stream through ``client.pump``, hands data frames to the
:class:`~watch_service.sink.spool.Spool`, and flushes on the spool's schedule. Before every
reconnect everything received is flushed, so the ``Last-Event-ID`` sent is always the last id
that is durable here. Reconnects back off from the server's ``retry:`` with jitter and a cap.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

import aiohttp
import orjson

from watch_service.sink.backoff import DEFAULT_RETRY_MS, backoff_ms
from watch_service.sink.client import Chunk, Connected, Disconnected, QueueItem, SessionError, create_session, pump
from watch_service.sink.config import SinkConfig
from watch_service.sink.indexer import Indexer
from watch_service.sink.landing import Landing
from watch_service.sink.progress import Stats, progress_line
from watch_service.sink.rows import DATA_KINDS
from watch_service.store.search_index import SearchIndex
from watch_service.sink.spool import Spool
from watch_service.sink.sse import Event, Retry

log = logging.getLogger("auditsync.sink")

INDEX_DRAIN_S = 5.0


def error_code(data: str) -> str | None:
    """The ``code`` of an ``event: error`` frame's data, if it has one."""
    try:
        body = orjson.loads(data)
    except ValueError:
        return None
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None


class Sink:
    def __init__(self, cfg: SinkConfig, landing: Landing, index: SearchIndex | None,
                 draw: Callable[[], float] = random.random) -> None:
        self.cfg, self.index, self._draw = cfg, index, draw
        self.stats = Stats()
        state = landing.load_state()
        self.indexer = Indexer(index, landing, state, self.stats) if index is not None else None
        self.spool = Spool(cfg, landing, state, self.stats, self.indexer)
        self._retry_ms = DEFAULT_RETRY_MS
        self._stopping = asyncio.Event()
        self._queue: asyncio.Queue[QueueItem] | None = None

    def stop(self) -> None:
        self._stopping.set()
        if self._queue is not None:
            # Wake a consumer waiting on a quiet stream; a full queue means it is not waiting.
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(Disconnected("stopping"))

    async def run(self) -> int:
        """Until stopped (0) or refused for good by the server (1)."""
        state = self.spool.state
        log.info("sink %s: topics %s from %s, resuming after frame %d", self.cfg.consumer,
                 ",".join(self.cfg.topics), self.cfg.url, state.frame_no)
        if self.cfg.faults.enabled:
            log.warning("%s", self.cfg.faults.describe())
        tasks = [asyncio.create_task(self._progress(), name="sink-progress")]
        if self.indexer is not None:
            tasks.append(asyncio.create_task(self.indexer.run(), name="sink-indexer"))
        try:
            async with aiohttp.ClientSession() as http:
                code = await self._loop(http)
            await self.spool.flush()
            if self.indexer is not None and not await self.indexer.drain(INDEX_DRAIN_S):
                log.warning("search index still behind at shutdown; it catches up on restart")
            await self.spool.save()
            log.info("sink %s stopped after frame %d (%d records, %d duplicates, %d reconnects)",
                     self.cfg.consumer, state.frame_no, self.stats.records,
                     self.stats.duplicates, self.stats.reconnects)
            return code
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self.index is not None:
                await self.index.close()

    async def _loop(self, http: aiohttp.ClientSession) -> int:
        attempt = 0
        while not self._stopping.is_set():
            if self._needs_session():
                try:
                    if not await self._unless_stopped(self._new_session(http)):
                        break
                except SessionError as exc:
                    log.error("%s", exc)
                    if exc.fatal:
                        return 1
                    attempt += 1
                    await self._pause(attempt)
                    continue
            ended, healthy = await self._stream(http)
            await self.spool.flush()
            if ended.fatal:
                log.error("giving up: %s", ended.reason)
                return 1
            if self._stopping.is_set():
                break
            if ended.session_gone:
                self.spool.state.wid = None
            self.stats.reconnects += 1
            attempt = 0 if healthy else attempt + 1
            log.warning("stream ended (%s); reconnecting", ended.reason)
            await self._pause(attempt)
        return 0

    async def _unless_stopped(self, work: Awaitable[None]) -> bool:
        """Await ``work`` unless a stop comes first (then cancel it); True if it completed."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        for pending in (stop, task):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
        if task.cancelled():
            return False
        task.result()
        return True

    def _needs_session(self) -> bool:
        s = self.spool.state
        changed = sorted(s.topics) != sorted(self.cfg.topics) or s.node != self.cfg.node
        return s.wid is None or changed

    async def _new_session(self, http: aiohttp.ClientSession) -> None:
        resume = {t: c for t, c in self.spool.cursors.items() if t in self.cfg.topics}
        wid, start = await create_session(http, self.cfg, resume)
        self.spool.start_session(wid, start)
        await self.spool.save()
        log.info("watch session %s starts at %s", wid, start)

    async def _pause(self, attempt: int) -> None:
        delay = backoff_ms(attempt, self._retry_ms, self.cfg.backoff_cap_ms, self._draw()) / 1000
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay)

    async def _stream(self, http: aiohttp.ClientSession) -> tuple[Disconnected, bool]:
        """One connection: returns how it ended and whether it delivered any frame."""
        self._queue = queue = asyncio.Queue(maxsize=64)
        wid = self.spool.state.wid
        assert wid is not None
        reader = asyncio.create_task(pump(http, self.cfg, wid, self.spool.last_id, queue))
        healthy = False
        try:
            while not self._stopping.is_set():
                item = await self._next(queue)
                if isinstance(item, Disconnected):
                    return item, healthy
                if isinstance(item, Chunk):
                    for it in item.items:
                        if isinstance(it, Retry):
                            self._retry_ms = it.ms
                        elif isinstance(it, Event):
                            ended = self._on_event(it, item.received_ms)
                            if ended is not None:
                                return ended, healthy
                            healthy = True
                elif isinstance(item, Connected):
                    log.info("stream %s open (Last-Event-ID %s)", wid, self.spool.last_id or "-")
                if self.spool.due():
                    await self.spool.flush()
            return Disconnected("stopping"), healthy
        finally:
            self._queue = None
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _next(self, queue: asyncio.Queue[QueueItem]) -> QueueItem | None:
        """The next queued item, or None when a flush falls due (or a stop check is due)."""
        with contextlib.suppress(asyncio.QueueEmpty):
            return queue.get_nowait()
        with contextlib.suppress(asyncio.TimeoutError):
            return await asyncio.wait_for(queue.get(), self.spool.wait_s())
        return None

    def _on_event(self, event: Event, received_ms: int) -> Disconnected | None:
        """Spool a data frame; an error frame or a malformed frame ends the connection."""
        if event.type == "error":
            return Disconnected(f"error frame: {event.data}",
                                session_gone=error_code(event.data) == "not_found")
        if event.type not in DATA_KINDS:
            log.warning("ignoring unknown event type %r", event.type)
            return None
        try:
            self.spool.add(event, received_ms)
        except (ValueError, TypeError, KeyError) as exc:
            return Disconnected(f"protocol: malformed {event.type} frame: {exc}")
        return None

    async def _progress(self) -> None:
        before, at = self.stats.snapshot(), time.monotonic()
        while True:
            await asyncio.sleep(self.cfg.progress_s)
            now, now_at = self.stats.snapshot(), time.monotonic()
            line = progress_line(before, now, now_at - at)
            if self.cfg.faults.enabled:
                log.warning("%s | %s", line, self.cfg.faults.describe())
            else:
                log.info("%s", line)
            before, at = now, now_at
