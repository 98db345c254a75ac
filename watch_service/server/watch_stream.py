"""One open SSE watch stream: the per-topic cursor map, draining backlog and live records into
frames, tombstones, caught-up, topic-deleted and heartbeats.

Backlog pages come from PostgreSQL; once a topic is at the tail, pages come from its shared
tailer's cache. A topic's cursor moves only after its frame was written, and is flushed to the
session row write-behind by the ``CursorFlusher``.
"""
from __future__ import annotations

import asyncio
import time

from aiohttp import web

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol import frames
from watch_service.protocol.records import encode
from watch_service.protocol.tombstones import missed_range
from watch_service.protocol.watch_request import WatchDefinition
from watch_service.store import tail
from watch_service.store import topics as store
from watch_service.web.metrics import Metrics
from watch_service.engine.tailer import Hub, Tailer

FAIRNESS_PAGES = 4  # pages one topic may send before the others get a turn


class WatchStream:
    def __init__(self, wid: str, definition: WatchDefinition, cursors: dict[str, int],
                 initial: dict[str, int], hub: Hub, response: web.StreamResponse,
                 metrics: Metrics, write_timeout_s: float) -> None:
        self.wid, self.d, self.hub, self.resp = wid, definition, hub, response
        self.cursors = dict(cursors)
        self.initial = initial  # the session's requested from_seq (for from_seq_too_old)
        self.metrics, self.write_timeout_s = metrics, write_timeout_s
        self.active: dict[str, Tailer] = {}
        self.dirty: set[str] = set()
        self.wake_event = asyncio.Event()
        self.live: dict[str, bool] = {t: False for t in cursors}
        self.last_write = time.monotonic()
        self.dirty_cursors = False
        self.closed = False
        self.strong = definition.consistency == "strong"

    # -- wiring ----------------------------------------------------------------------------
    def wake(self, topic: str) -> None:
        if topic in self.active:
            self.dirty.add(topic)
            self.wake_event.set()

    async def run(self) -> None:
        await self._write(frames.retry(2000))
        for topic in self.cursors:
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
                self.metrics.frames.inc(1, "heartbeat")
                continue
            try:
                async with asyncio.timeout(remaining):
                    await self.wake_event.wait()
            except TimeoutError:
                pass

    # -- one topic ---------------------------------------------------------------------------
    def _upto(self, tailer: Tailer) -> int:
        return tailer.durable_head if self.d.consistency == "strong" else tailer.head

    async def _drain(self, topic: str) -> None:
        tailer = self.active[topic]
        for _ in range(FAIRNESS_PAGES):
            after = self.cursors[topic]
            page = None
            if not tailer.deleted and after >= tailer.earliest - 1:
                page = tailer.cached(after, self.d.limit, self.d.max_batch_bytes, self.d.flags,
                                     self._upto(tailer))
            if page is not None:
                head, upto = tailer.head, self._upto(tailer)
            else:
                got = await self._read_backlog(topic, after)
                if got is None:
                    return
                page, head, upto = got
            if page:
                await self._send_records(topic, page, head)
            if not page or self.cursors[topic] >= upto:
                # Only at the head: under "strong", records past the durable head wait for
                # their WAL flush, whose mark_durable wakes this stream again.
                if not self.live[topic] and self.cursors[topic] >= upto >= head:
                    self.live[topic] = True
                    await self._send(topic, "caught-up", frames.caught_up_data(topic, upto),
                                     self.cursors[topic])
                return
            self.live[topic] = False
        self.dirty.add(topic)  # more to send; let the other topics have a turn first

    async def _read_backlog(self, topic: str, after: int):
        """A page from PostgreSQL as (records, head, upto); handles deletion and tombstones.
        None: this topic has nothing more to do now."""
        tailer = self.active[topic]
        async with self.hub.pool.connection() as conn:
            page = await tail.read_tail(conn, topic, after, self.d.limit)
            if page is None or page.deleted:
                head = page.head_seq if page else after
                await self._send(topic, "topic-deleted", frames.topic_deleted_data(topic, head),
                                 max(after, head))
                self.hub.unsubscribe(topic, self.wake, self.strong)
                del self.active[topic]
                return None
            missed = missed_range(after, page.earliest_seq)
            if missed is not None:
                if after == self.initial.get(topic) and not self.live[topic]:
                    reason = "from_seq_too_old"
                else:
                    reason = await store.gap_reason(conn, topic, *missed)
                await self._send(topic, "tombstone", frames.tombstone_data(
                    topic, reason, missed[0], missed[1], page.earliest_seq, page.head_seq),
                    missed[1])
        if self.d.consistency == "strong" and page.flush_lsn < page.insert_lsn:
            upto = tailer.durable_head
        else:
            upto = page.head_seq
        out, size = [], 0
        for rec in page.records:
            if rec.seq > upto:
                break
            enc = encode(rec, include_meta=self.d.include_meta, include_tags=self.d.include_tags,
                         include_data=self.d.include_data)
            if out and size + len(enc) > self.d.max_batch_bytes:
                break
            out.append((rec, enc))
            size += len(enc)
        return out, max(page.head_seq, tailer.head), upto

    async def _send_records(self, topic: str, page: list, head: int) -> None:
        node = self.d.node
        encoded = [enc for rec, enc in page if node is None or rec.node != node]
        last = page[-1][0].seq
        if not encoded:  # all filtered: the cursor moves without a frame
            self.cursors[topic] = last
            self.dirty_cursors = True
            return
        data = frames.record_data(topic, encoded, self.cursors[topic], last, head)
        await self._send(topic, "record", data, last)

    async def _send(self, topic: str, event: str, data: str, new_cursor: int) -> None:
        """Write one frame whose id carries ``new_cursor`` for ``topic``; only once it is
        written does the stream's cursor move."""
        frame_id = cursor_codec.encode({**self.cursors, topic: new_cursor})
        await self._write(frames.frame(event, data, frame_id))
        self.cursors[topic] = new_cursor
        self.dirty_cursors = True
        self.metrics.frames.inc(1, event)

    async def _write(self, data: bytes) -> None:
        async with asyncio.timeout(self.write_timeout_s):
            await self.resp.write(data)
        self.last_write = time.monotonic()
