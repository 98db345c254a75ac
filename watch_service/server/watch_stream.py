"""One open SSE watch stream: the I/O shell around ``protocol.stream_state``.

A topic the stream is behind on is paged by the stream's own task (backlog from PostgreSQL, then
the shared tailer's cache); once at the tail it joins the tailer's live set and its frames are
pushed by the tailer (``engine.fanout``): no task wakes per record. Every frame goes into the
socket's transport synchronously and its cursor moves at once, so frames of different topics
never carry ids out of order; the paging task then waits for the buffer to drain. A stream whose
buffer is above ``HIGH_WATER`` is not pushed to: it pages on its own until it catches up.

Nothing here arms a timer per write: ``check`` (run for every stream by one periodic sweep)
ends streams whose client went away and cuts off a client whose buffer has not drained for
``write_timeout_s``. Cursors are written to the session row write-behind, fenced by the
stream's generation (``gen``), by ``server.stream_upkeep``: a stream taken over ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from aiohttp import web

from watch_service.engine.fanout import HIGH_WATER, Group, SoloRun
from watch_service.engine.hub import Hub
from watch_service.engine.tailer import Tailer
from watch_service.protocol import frames
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.paging import build_page
from watch_service.protocol.records import encode
from watch_service.protocol.stream_state import Delivered, Outgoing, SharedFrame, StreamState
from watch_service.protocol.watch_request import WatchDefinition
from watch_service.store import tail
from watch_service.store import topics as store
from watch_service.web.metrics import Metrics

log = logging.getLogger("auditsync.watch")
FAIRNESS_PAGES = 4  # pages one topic may send before the others get a turn
DRAIN_AT = 64 * 1024  # the paging task waits for the buffer to drain above this
SWEEP_S = 0.25  # how often ``sweep`` looks at every stream (more streams: stream_upkeep)
Page = Sequence[tuple[Delivered, str]]


def http_chunk(payload: bytes) -> bytes:
    """``payload`` as one HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


class StreamEnded(AuditsyncError, ConnectionResetError):
    """The stream ends: its client went away, stopped reading, or a newer stream took over."""


class WatchStream:
    def __init__(
        self,
        wid: str,
        gen: int,
        definition: WatchDefinition,
        cursors: dict[str, int],
        initial: dict[str, int],
        hub: Hub,
        request: web.BaseRequest,
        response: web.StreamResponse,
        metrics: Metrics,
        claimed: dict[str, int] | None = None,
    ) -> None:
        self.wid, self.gen, self.d, self.hub, self.resp = wid, gen, definition, hub, response
        self.transport, self.writer = request.transport, request.writer
        self.strong = definition.consistency == "strong"
        self.state = StreamState(
            cursors, initial, node=definition.node, strong=self.strong, claimed=claimed
        )
        self.group: Group = (
            definition.flags,
            definition.limit,
            definition.max_batch_bytes,
            definition.node,
        )
        self.metrics = metrics
        self.active: dict[str, Tailer] = {}
        self.rewinds: dict[str, int] = {}  # per topic: the tailer's rewinds already checked
        self.pushed: set[str] = set()  # topics whose tailer pushes to this stream
        self.dirty: set[str] = set()
        self.wake_event = asyncio.Event()
        # The loop's clock (uvloop: its time as of this turn, no clock read per write; the
        # heartbeat's timeout runs on it too).
        self._clock = asyncio.get_running_loop().time
        self._last_write = self._clock()
        self.ending: str | None = None  # why the stream ends, once it must
        self.closed = False
        self._sent = 0  # bytes handed to the transport, but a run's (``sent``)
        self.solo_run: SoloRun | None = None  # the tailer's run this stream is in, if any
        self._run_base = 0  # the run's ``sent`` when this stream joined it
        self.chunked = True  # Transfer-Encoding: chunked (HTTP/1.1)
        self._swept = (0, 0)  # (sent, buffered) at the last sweep
        self._stalled_since: float | None = None
        self._draining = False
        self.flushed_at = 0.0  # when the cursor flusher last wrote this stream's cursors
        self.renewed_at = time.monotonic()  # when its lease was last renewed (opened: now)

    @property
    def sent(self) -> int:
        """Bytes handed to the transport (a run's pushes counted once they are all written)."""
        run = self.solo_run
        return self._sent if run is None else self._sent + run.sent - self._run_base

    @property
    def last_write(self) -> float:
        """The loop's time of the last write to the transport."""
        run = self.solo_run
        return self._last_write if run is None else max(self._last_write, run.last_write)

    # -- wiring ----------------------------------------------------------------------------
    def wake(self, topic: str) -> None:
        if topic in self.active and topic not in self.pushed:
            self.dirty.add(topic)
            self.wake_event.set()

    def left(self, topic: str) -> None:
        """The tailer stopped pushing ``topic``: page it from here."""
        self.pushed.discard(topic)
        self.dirty.add(topic)
        self.wake_event.set()

    def solo_transport(self, topic: str) -> asyncio.Transport | None:
        """The transport, if this stream takes a run's bytes as they are: one topic over
        chunked HTTP/1.1, its connection open (``_join`` saw it live, not ending, its buffer
        under the high-water mark)."""
        t = self.transport
        if self.chunked and len(self.state.live) == 1 and t is not None and not t.is_closing():
            return t
        return None

    def entered(self, run: SoloRun) -> None:
        self.solo_run, self._run_base = run, run.sent
        self.state.joined_run(run)

    def exited(self, run: SoloRun, cursor: int, sent: int) -> None:
        self.state.left_run(cursor)
        self._sent += run.sent - self._run_base + sent
        self._last_write = max(self._last_write, run.last_write)
        self.solo_run = None

    @staticmethod
    def run_wire(frames: Sequence[bytes]) -> bytes:
        return b"".join([http_chunk(frame) for frame in frames])

    def counted(self, event: str, n: int) -> None:
        self.metrics.frame_sent(event, n)

    def push(
        self, topic: str, after: int, shared: Sequence[SharedFrame], upto: int, head: int
    ) -> bool:
        """Frames from the tailer, built for this stream (one outside its group's ``SoloRun``:
        several topics, HTTP/1.0, or not where the run is) and written now in one transport
        write; False: the stream cannot take them and pages on its own from here."""
        t = self.transport
        out = None
        if self.ending is None and t is not None and not t.is_closing() and not self._full():
            out = self.state.pushed(topic, after, shared, upto, head)
        if out is None:
            self.left(topic)
            return False
        if out:
            self._emit(out[0].data if len(out) == 1 else b"".join([o.data for o in out]))
            if out[-1].event != "record":
                self.metrics.frame_sent(out[-1].event)
        return True

    def end(self, reason: str) -> None:
        """End the stream now: no more pushes, and its task returns at its next step (a task
        waiting for a slow client's buffer to drain is cut off)."""
        if self.ending is None:
            self.ending = reason
        for topic in self.pushed:
            self.active[topic].leave(self)
        self.pushed.clear()
        self.wake_event.set()
        if self._draining and self.transport is not None:
            self.transport.abort()

    def check(self, now: float, write_timeout_s: float) -> None:
        """One sweep over this stream: a gone client or a buffer that has not drained for
        ``write_timeout_s`` ends it."""
        t = self.transport
        if t is None or t.is_closing():
            self.end("disconnected")
            return
        buffered = t.get_write_buffer_size()
        drained = self._swept[1] + (self.sent - self._swept[0]) - buffered
        self._swept = (self.sent, buffered)
        if buffered == 0 or drained > 0:
            self._stalled_since = None
        elif self._stalled_since is None:
            self._stalled_since = now
        elif now - self._stalled_since >= write_timeout_s:
            log.info(
                "stream %s: nothing drained for %.1fs; disconnecting", self.wid, write_timeout_s
            )
            t.abort()
            self.end("write timeout")

    async def run(self) -> None:
        await self.resp.write(frames.retry(frames.RETRY_MS))  # sends the headers too
        self.chunked = bool(getattr(self.writer, "chunked", True))
        self._sent += len(frames.retry(frames.RETRY_MS))
        for topic in self.state.cursors:
            self.active[topic] = tailer = self.hub.subscribe(topic, self.wake, self.strong)
            self.rewinds[topic] = len(tailer.rewound_to)
            self.dirty.add(topic)
        try:
            await self._loop()
        finally:
            for topic, tailer in self.active.items():
                tailer.leave(self)
                self.hub.unsubscribe(topic, self.wake, self.strong)
            self.active.clear()
            self.pushed.clear()

    async def _loop(self) -> None:
        heartbeat = self.d.heartbeat_ms / 1000
        while self.ending is None:
            while self.dirty and self.ending is None:
                topic = self.dirty.pop()
                if topic in self.active and topic not in self.pushed:
                    await self._drain(topic)
            self.wake_event.clear()
            if self.dirty or self.ending is not None:
                continue
            remaining = heartbeat - (self._clock() - self.last_write)
            if remaining <= 0:
                self._emit(frames.HEARTBEAT)
                self.metrics.frame_sent("heartbeat")
                await self._flow()
                continue
            try:
                async with asyncio.timeout(remaining):
                    await self.wake_event.wait()
            except TimeoutError:
                pass
        if self.ending != "taken over":
            raise StreamEnded(self.ending)

    # -- one topic ---------------------------------------------------------------------------
    async def _drain(self, topic: str) -> None:
        tailer, state = self.active[topic], self.state
        for _ in range(FAIRNESS_PAGES):
            self.rewinds[topic], went_back_to = tailer.rewinds_since(self.rewinds[topic])
            if went_back_to is not None:  # while this stream was open: said before anything
                await self._send(state.rewound(topic, went_back_to))
            after = state.cursors[topic]
            upto = state.upto(tailer.head, tailer.durable_head)
            cached = (
                None
                if topic in state.claimed  # a presented cursor is checked against PostgreSQL
                else tailer.cached(after, self.d.limit, self.d.max_batch_bytes, self.d.flags, upto)
            )
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
            settled = state.settle(topic, not page, upto, head)
            await self._send(settled.caught_up)
            if settled.drained:
                self._join(topic, tailer)
                return
            if self.ending is not None:
                return
        self.dirty.add(topic)  # more to send; let the other topics have a turn first

    def _join(self, topic: str, tailer: Tailer) -> None:
        """Join the tailer's live set if nothing lies between this stream and the tail."""
        t, cursor = self.transport, self.state.cursors[topic]
        if (
            self.ending is None
            and not self.strong
            and self.state.live[topic]
            and topic not in self.dirty
            and cursor == tailer.cache_end
            and cursor >= tailer.head
            and t is not None
            and not self._full()
            and tailer.join(self)
        ):
            self.pushed.add(topic)

    async def _read_backlog(self, topic: str, after: int) -> tuple[Page, int, int] | None:
        """A page from PostgreSQL as (records, head, upto), after the ``rewound`` frame of a
        head below the consumer's cursor and the tombstone of any gap before it. None: the
        topic was deleted (its last frame is sent) or is gone."""
        tailer, state = self.active[topic], self.state
        async with self.hub.pool.connection() as conn:
            page = await tail.read_tail(conn, topic, after, self.d.limit)
            rewound = None if page is None or page.deleted else state.rewound(topic, page.head_seq)
            if rewound is not None:
                await self._send(rewound)
                if state.cursors[topic] != after:
                    after = state.cursors[topic]
                    page = await tail.read_tail(conn, topic, after, self.d.limit)
            if page is None or page.deleted:
                head = page.head_seq if page else after
                await self._send(state.topic_deleted(topic, after, head))
                tailer.leave(self)
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

    # -- writing -----------------------------------------------------------------------------
    async def _send(self, out: Outgoing | None) -> None:
        """Write one frame; its cursor moves once the transport has it."""
        if out is None:
            return
        self._emit(out.data)
        self.state.written(out)
        self.metrics.frame_sent(out.event)
        await self._flow()

    def _emit(self, payload: bytes) -> None:
        """Hand ``payload`` to the transport now, as one HTTP/1.1 chunk (an HTTP/1.0 response
        is not chunked). The headers went out with the ``retry`` frame."""
        t = self.transport
        if self.ending is not None or t is None or t.is_closing():
            raise StreamEnded(self.ending or "disconnected")
        self._write(t, http_chunk(payload) if self.chunked else payload)

    def _write(self, t: asyncio.Transport, data: bytes) -> None:
        """``data``, framed for the wire, to ``t`` (checked open by the caller)."""
        t.write(data)
        self._sent += len(data)
        self._last_write = self._clock()

    def _full(self) -> bool:
        return self.transport is not None and self.transport.get_write_buffer_size() > HIGH_WATER

    async def _flow(self) -> None:
        """Wait while the socket buffer is full (a sweep cuts a client that never drains)."""
        t = self.transport
        if t is not None and t.get_write_buffer_size() > DRAIN_AT:
            self._draining = True
            try:
                await self.writer.drain()
            finally:
                self._draining = False
