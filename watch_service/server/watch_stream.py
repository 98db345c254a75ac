"""One open SSE watch stream: the I/O shell around ``protocol.stream_state``.

It reads pages (backlog from PostgreSQL; once a topic is at the tail, from its shared tailer's
cache), writes the frames the state machine builds, reports each written frame back (only then
does a cursor move), takes turns between topics and sends heartbeats. Cursors are flushed to
the session row write-behind by the ``CursorFlusher``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from aiohttp import web

from watch_service.engine.tailer import Hub, Tailer
from watch_service.protocol import frames
from watch_service.protocol.paging import build_page
from watch_service.protocol.records import encode
from watch_service.protocol.stream_state import Delivered, Outgoing, StreamState
from watch_service.protocol.watch_request import WatchDefinition
from watch_service.store import tail
from watch_service.store import topics as store
from watch_service.web.metrics import Metrics

FAIRNESS_PAGES = 4  # pages one topic may send before the others get a turn
Page = Sequence[tuple[Delivered, str]]


class WatchStream:
    def __init__(
        self,
        wid: str,
        definition: WatchDefinition,
        cursors: dict[str, int],
        initial: dict[str, int],
        hub: Hub,
        response: web.StreamResponse,
        metrics: Metrics,
        write_timeout_s: float,
    ) -> None:
        self.wid, self.d, self.hub, self.resp = wid, definition, hub, response
        self.strong = definition.consistency == "strong"
        self.state = StreamState(cursors, initial, node=definition.node, strong=self.strong)
        self.metrics, self.write_timeout_s = metrics, write_timeout_s
        self.active: dict[str, Tailer] = {}
        self.dirty: set[str] = set()
        self.wake_event = asyncio.Event()
        self.last_write = time.monotonic()
        self.closed = False

    # -- wiring ----------------------------------------------------------------------------
    def wake(self, topic: str) -> None:
        if topic in self.active:
            self.dirty.add(topic)
            self.wake_event.set()

    async def run(self) -> None:
        await self._write(frames.retry(frames.RETRY_MS))
        for topic in self.state.cursors:
            self.active[topic] = self.hub.subscribe(topic, self.wake, self.strong)
            self.dirty.add(topic)
        try:
            await self._loop()
        finally:
            for topic in list(self.active):
                self.hub.unsubscribe(topic, self.wake, self.strong)
            self.active.clear()

    async def _loop(self) -> None:
        heartbeat = self.d.heartbeat_ms / 1000
        while True:
            while self.dirty:
                topic = self.dirty.pop()
                if topic in self.active:
                    await self._drain(topic)
            self.wake_event.clear()
            if self.dirty:
                continue
            remaining = heartbeat - (time.monotonic() - self.last_write)
            if remaining <= 0:
                await self._write(frames.HEARTBEAT)
                self.metrics.frames.labels("heartbeat").inc()
                continue
            try:
                async with asyncio.timeout(remaining):
                    await self.wake_event.wait()
            except TimeoutError:
                pass

    # -- one topic ---------------------------------------------------------------------------
    async def _drain(self, topic: str) -> None:
        tailer, state = self.active[topic], self.state
        for _ in range(FAIRNESS_PAGES):
            after = state.cursors[topic]
            upto = state.upto(tailer.head, tailer.durable_head)
            cached = tailer.cached(after, self.d.limit, self.d.max_batch_bytes, self.d.flags, upto)
            page: Page
            if cached is not None:
                page, head = cached, tailer.head
            else:
                got = await self._read_backlog(topic, after)
                if got is None:
                    return
                page, head, upto = got
            if page:
                await self._send(state.records(topic, page, head))
                if cached is not None:  # live at the tail: how long the newest record took
                    lag = time.time() - page[-1][0].rec.ts / 1000
                    self.metrics.delivery_lag.observe(max(lag, 0.0))
            settled = state.settle(topic, not page, upto, head)
            await self._send(settled.caught_up)
            if settled.drained:
                return
        self.dirty.add(topic)  # more to send; let the other topics have a turn first

    async def _read_backlog(self, topic: str, after: int) -> tuple[Page, int, int] | None:
        """A page from PostgreSQL as (records, head, upto), after the tombstone of any gap
        before it. None: the topic was deleted (its last frame is sent) or is gone."""
        tailer, state = self.active[topic], self.state
        async with self.hub.pool.connection() as conn:
            page = await tail.read_tail(conn, topic, after, self.d.limit)
            if page is None or page.deleted:
                head = page.head_seq if page else after
                await self._send(state.topic_deleted(topic, after, head))
                self.hub.unsubscribe(topic, self.wake, self.strong)
                del self.active[topic]
                return None
            loss = state.loss(topic, after, page.earliest_seq)
            if loss is not None:
                reason = loss.reason or await store.gap_reason(
                    conn, topic, loss.gap_from, loss.gap_to
                )
                await self._send(
                    state.tombstone(topic, loss, reason, page.earliest_seq, page.head_seq)
                )
        upto = state.upto(
            page.head_seq, tailer.durable_head, flushed=page.flush_lsn >= page.insert_lsn
        )
        d = self.d
        records = build_page(
            page.records,
            lambda rec: encode(
                rec,
                include_meta=d.include_meta,
                include_tags=d.include_tags,
                include_data=d.include_data,
            ),
            limit=d.limit,
            max_bytes=d.max_batch_bytes,
            upto=upto,
        )
        return records, max(page.head_seq, tailer.head), upto

    async def _send(self, out: Outgoing | None) -> None:
        """Write one frame; only once it is written does the stream's cursor move."""
        if out is None:
            return
        await self._write(out.data)
        self.state.written(out)
        self.metrics.frames.labels(out.event).inc()

    async def _write(self, data: bytes) -> None:
        async with asyncio.timeout(self.write_timeout_s):
            await self.resp.write(data)
        self.last_write = time.monotonic()
