"""The LISTEN connection and the shared tailers of this process.

One ``Hub`` per process: it subscribes streams to per-topic ``Tailer``s (made on first use,
closed with their last subscriber), dispatches ``NOTIFY`` payloads to them, re-checks heads by a
safety poll in case a notification was lost with its connection, waits for WAL flushes for
``consistency: strong`` watchers, and keeps the byte total of all tailers' caches. Its
connection LISTENs only while the process has tailers (a worker that serves no stream is not
woken by every commit) and reconnects with a bounded exponential backoff, one log line per
attempt. ``aclose`` cancels and awaits every task the hub started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import psycopg
from psycopg_pool import AsyncConnectionPool

from watch_service.engine.stopping import stop_tasks
from watch_service.engine.tailer import CACHE_BYTES, Tailer, Wake
from watch_service.protocol.requests import NewRecord
from watch_service.store import sessions, tail, topics
from watch_service.store.topics import CHANNEL, AppendResult

log = logging.getLogger("auditsync.tailer")
SAFETY_POLL_S = 2.0
RECONNECT_S = (0.1, 30.0)  # the LISTEN reconnect backoff: first delay, ceiling
UNLISTEN_AFTER_S = 1.0  # a process with no tailer for this long stops listening


def _unobserved(value: float) -> None:
    """A figure no metric takes (a hub built without the app's metrics)."""


class Hub:
    """The LISTEN connection and the per-topic tailers of this process."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        db_url: str,
        cache_limit: int = CACHE_BYTES,
        on_cache_bytes: Callable[[float], None] = _unobserved,
        on_delivery_lag: Callable[[float], None] = _unobserved,
        on_frames: Callable[[int], None] = _unobserved,
    ) -> None:
        """``on_*``: the metrics each figure is reported to (the app's; none by default)."""
        self.pool, self.db_url = pool, db_url
        self._on_delivery_lag = on_delivery_lag
        self._on_frames = on_frames  # told how many record frames each push wrote
        self.own_appends: set[tuple[int, str]] = set()  # the Appender's ``in_flight``
        self.tailers: dict[str, Tailer] = {}
        self.cache_limit = cache_limit  # bytes all tailers' caches may hold together
        self.cache_total = 0
        self.cache_peak = 0  # the most the caches held once bounded (tests and benchmarks)
        self._on_cache_bytes = on_cache_bytes
        self._flush_waits: list[tuple[Tailer, int, int]] = []
        self._flush_task: asyncio.Task | None = None
        self._retired: set[asyncio.Task] = set()  # cancelled tailer tasks not yet finished
        self._followed = asyncio.Event()  # set while ``run`` should LISTEN (there are tailers)
        # Told the wid of a session another process takes over (``store.sessions``): its
        # stream here, if any, stores its cursors and releases it. A process that holds a
        # stream has a tailer, so it listens.
        self.on_takeover: Callable[[str], None] | None = None

    def pushed(self, newest_ts_ms: int, frames: int) -> None:
        """A push wrote ``frames`` record frames to the live streams: observe the newest
        record's commit-to-write time, count the frames."""
        self._on_delivery_lag(max(time.time() - newest_ts_ms / 1000, 0.0))
        if frames:
            self._on_frames(frames)

    def cache_grew(self, added: int) -> None:
        self.cache_total += added

    def cache_bounded(self) -> None:
        """A tailer has trimmed its cache back under the bound: report the bytes held."""
        self.cache_peak = max(self.cache_peak, self.cache_total)
        self._on_cache_bytes(self.cache_total)

    def subscribe(self, topic: str, wake: Wake, strong: bool = False) -> Tailer:
        tailer = self.tailers.get(topic)
        if tailer is None:
            tailer = self.tailers[topic] = Tailer(self, topic)
            tailer.kick()
            self._followed.set()
        elif strong and not tailer.strong_subs:
            tailer.kick()  # appends taken without a read left ``durable_head`` behind: read
        tailer.subs.add(wake)
        tailer.asleep.add(wake)
        tailer.strong_subs += strong
        return tailer

    def reread(self, topic: str) -> None:
        """Whatever the topic holds now, its tailer (if any) reads it."""
        tailer = self.tailers.get(topic)
        if tailer is not None:
            tailer.kick()

    def appended(self, result: AppendResult, records: Sequence[NewRecord]) -> None:
        """This process committed ``records`` (the ``Appender`` tells): its tailer of the topic,
        if any, may take them as they are (``Tailer.offer``)."""
        tailer = self.tailers.get(result.topic)
        if tailer is not None:
            tailer.heard_at = time.monotonic()
            tailer.offer(result, records)

    def unsubscribe(self, topic: str, wake: Wake, strong: bool = False) -> None:
        tailer = self.tailers.get(topic)
        if tailer is not None:
            if wake in tailer.subs:
                tailer.strong_subs -= strong
            tailer.subs.discard(wake)
            tailer.asleep.discard(wake)
            if not tailer.subs:
                del self.tailers[topic]
                task = tailer.close()
                if task is not None:
                    self._retired.add(task)
                    task.add_done_callback(self._retired.discard)

    async def aclose(self) -> None:
        """Cancel and await every task the hub started (its owner calls this on exit)."""
        tasks = [t._task for t in self.tailers.values() if t._task is not None]
        tasks += [*self._retired, *([self._flush_task] if self._flush_task else [])]
        await stop_tasks(tasks)

    def dispatch(self, payload: str, pid: int = 0) -> None:
        """A NOTIFY from backend ``pid`` (its kinds: ``store.topics``, and a takeover's
        ``store.sessions.TAKEOVER``). An append this
        process's ``Appender`` has under way on that backend is skipped: the appender hands
        its records to the tailer itself (``appended``). An append that carries its records is
        offered to the tailer as they are (``Tailer.offer``, which reads only if it cannot take
        them)."""
        header = payload.partition("\n")[0].split(" ")
        kind, head, topic = header[0], header[1], header[-1]
        if kind == sessions.TAKEOVER:
            if self.on_takeover is not None:
                self.on_takeover(header[1])
            return
        tailer = self.tailers.get(topic)
        if tailer is None:
            return
        tailer.heard_at = time.monotonic()
        if kind in ("a", "r") and (pid, topic) in self.own_appends:
            return
        if kind == "r":
            tailer.offer(*topics.parse_notice(payload))
        elif kind == "a":
            tailer.noticed(int(head), int(header[2]) if len(header) == 4 else None)
        elif kind == "t":
            tailer.on_trimmed(int(head))
        elif kind == "d":
            tailer.on_deleted(int(head))
        elif kind == "c":
            tailer.on_created()

    def await_flush(self, tailer: Tailer, lsn: int, head: int) -> None:
        self._flush_waits.append((tailer, lsn, head))
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.create_task(self._wait_flush(), name="flush-wait")

    async def _wait_flush(self) -> None:
        while self._flush_waits:
            force = any(t.strong_subs for t, _, _ in self._flush_waits)
            if not force:
                await asyncio.sleep(0.005)  # nobody waits: let the WAL writer flush on its own
            async with self.pool.connection() as conn:
                # A strong watcher waits: flush now (one fsync covers every pending commit)
                # rather than wait for the WAL writer's next round (wal_writer_delay).
                flushed = await (tail.force_flush(conn) if force else tail.flush_lsn(conn))
            pending = []
            for tailer, lsn, head in self._flush_waits:
                if flushed >= lsn:
                    tailer.mark_durable(head)
                else:
                    pending.append((tailer, lsn, head))
            self._flush_waits = pending

    async def run(self) -> None:
        """Keep the LISTEN connection, reconnecting with a bounded exponential backoff (one log
        line per attempt), and LISTEN on it while this process has tailers."""
        delay = RECONNECT_S[0]
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.db_url, autocommit=True
                ) as conn:
                    delay = RECONNECT_S[0]
                    await self._listen_while_followed(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", reason, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_S[1])

    async def _listen_while_followed(self, conn: psycopg.AsyncConnection) -> None:
        """LISTEN from the first tailer on; UNLISTEN once there has been none for
        ``UNLISTEN_AFTER_S``. Each LISTEN is followed by a re-read of every tailer: what was
        committed before it took effect was heard by no one."""
        while True:
            await self._followed.wait()
            await conn.execute(f"LISTEN {CHANNEL}")
            for tailer in list(self.tailers.values()):
                tailer.suspect()  # and a connection lost may mean a failover: check caches
            while self.tailers:
                async for note in conn.notifies(timeout=UNLISTEN_AFTER_S):
                    self.dispatch(note.payload, note.pid)
            await conn.execute(f"UNLISTEN {CHANNEL}")
            async for note in conn.notifies(timeout=0):  # what came with UNLISTEN: now, not
                self.dispatch(note.payload, note.pid)  # with the next LISTEN, when it is stale
            if not self.tailers:
                self._followed.clear()

    def quiet_topics(self) -> list[str]:
        """The followed topics nothing was heard of for ``SAFETY_POLL_S``. Only these can hide
        a lost notification: the next one of a topic that is heard of shows its head, and the
        tailer reads whatever it missed."""
        since = time.monotonic() - SAFETY_POLL_S
        return [name for name, t in self.tailers.items() if t.heard_at <= since]

    async def safety_poll(self) -> None:
        """Re-check the heads of quiet topics periodically, in case a notification was lost
        with a connection. A busy topic is left alone: reading its row, which every append
        updates, stalled those appends for 6-7 ms every poll (measured at 500 appends/s)."""
        while True:
            await asyncio.sleep(SAFETY_POLL_S)
            quiet = self.quiet_topics()
            if not quiet:
                continue
            with contextlib.suppress(Exception):
                async with self.pool.connection() as conn:
                    heads = await tail.topic_heads(conn, quiet)
                    for name, head in heads.items():
                        tailer = self.tailers.get(name)
                        if tailer is not None and head > tailer.head:
                            tailer.kick(head)
                        elif tailer is not None and head < tailer.head:  # the source went back
                            tailer.suspect()
