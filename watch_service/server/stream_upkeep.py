"""The periodic upkeep of every open SSE stream, as two app-owned tasks.

``cursor_flusher``: write-behind of the streams' cursor maps and leases in batched statements,
fenced by each stream's generation (a stream whose write matched no row was taken over, maybe
by another worker, and ends), plus the final write of streams that ended (cursors stored, lease
released) — batched too, so thousands of clients leaving at once cost a few statements, not a
pool connection each. At most ``FLUSH_ROWS_PER_S`` cursor maps a second, those flushed longest
ago first, so the write load on PostgreSQL does not grow with the number of streams: with many
streams a crash re-delivers a few seconds more, never skips.

``sweeper``: notices gone clients and clients whose socket buffer has not drained for
``write_timeout_s`` (``WatchStream.check``), with no timer per write.

``Releases``: a GET in another process (or replica) that takes over a session asks its stream
here to end and store its cursors at once (``store.sessions.ask_release``), rather than leave
the takeover the cursors of the last batched write.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time

from aiohttp import web

from watch_service.engine.stopping import stop_tasks
from watch_service.server.watch_stream import SWEEP_S, WatchStream
from watch_service.store import sessions
from watch_service.web.app_keys import GC_PACER, METRICS, POOL, SETTINGS, STREAMS

log = logging.getLogger("auditsync.watch")
# A stream's lease on its session, renewed every third of it. It only keeps the idle GC off the
# session (a crashed holder's session is spared this long, then ``session_ttl_ms``); a renewal
# also marks the session active, an indexed column, so it is no heap-only update: at 10,000
# streams a 30 s lease was 1,000 such rows a second, this one 333.
LEASE_S = 90.0
TAKEOVER_WAIT_S = 0.5  # how long a takeover waits for the stream it replaces to release
# Cursor maps written a second at most (lease renewals: all that are due). The stored map only
# bounds what a stream cut off without its final write (its worker killed) is sent again on
# resume; each row costs PostgreSQL ~15-30 µs of CPU, which at 10,000 watchers was most of what
# set the latency's tail (bench/watch.py: 2,000 rows a second per worker, 6,600-12,600 µs of
# PostgreSQL CPU per append; 1,000: 3,800-4,400).
FLUSH_ROWS_PER_S = 1000
# Streams a flush round and a sweep look at, a second at most: each looks at every open stream,
# so with many streams their rounds come less often (5,000 streams in a worker: a flush round
# a second, a sweep every half second), and their CPU does not grow with the streams. (At 5,000
# streams a worker each look at a stream cost ~7 µs: the objects are out of the CPU's caches.)
FLUSH_SCAN_PER_S = 5_000
SWEEP_SCAN_PER_S = 10_000
BATCH_ROWS = 200  # rows a statement writes; the loop runs other work between two
# Streams a round looks at between two turns of the loop: a look costs up to ~7 µs with many
# streams, and 600 in one go held the loop for 2-7 ms, on the p99 of every stream.
SCAN_SLICE = 100


async def flush(app: web.Application, rows: int) -> None:
    """One round: final writes of ended streams; the leases due for renewal (a stream's last
    renewal a third of ``LEASE_S`` ago: each stream on its own clock, so renewals spread as
    the streams' openings did, not ten thousand rows every ten seconds), with their cursors;
    then the changed cursor maps of the others (at most ``rows`` of them, those written longest
    ago first). In statements of at most ``BATCH_ROWS`` rows, the loop free between them."""
    streams: set[WatchStream] = app[STREAMS]
    renew_before = time.monotonic() - LEASE_S / 3
    ended: list[WatchStream] = []
    renew: list[WatchStream] = []
    due: list[WatchStream] = []
    for i, stream in enumerate(list(streams), 1):
        if stream.closed:
            ended.append(stream)
        elif stream.renewed_at <= renew_before:
            renew.append(stream)
        elif stream.state.dirty:
            due.append(stream)
        if i % SCAN_SLICE == 0:
            await asyncio.sleep(0)
    if ended:
        streams.difference_update(ended)  # slots are free at once; the rows follow
        app[METRICS].open_streams.set(len(streams))
        for batch in _batches(ended):
            try:
                async with app[POOL].connection() as conn:
                    await sessions.close_streams(
                        conn, [(s.wid, s.gen, dict(s.state.cursors)) for s in batch]
                    )
            except Exception:
                streams.update(ended)  # retried next round (a final write is idempotent)
                raise
        if (pacer := app.get(GC_PACER)) is not None:  # what they left may be frozen
            pacer.streams_ended(len(ended), len(streams))
    if len(due) > rows:
        due = heapq.nsmallest(rows, due, key=lambda s: s.flushed_at)
    batches = [(b, True) for b in _batches(renew)] + [(b, False) for b in _batches(due)]
    for batch, renewing in batches:
        now = time.monotonic()
        renewed = [s.renewed_at for s in batch]
        for stream in batch:
            stream.state.dirty, stream.flushed_at = False, now
            if renewing:
                stream.renewed_at = now
        try:
            async with app[POOL].connection() as conn:
                written = await sessions.save_cursors(
                    conn,
                    [(s.wid, s.gen, dict(s.state.cursors)) for s in batch],
                    LEASE_S,
                    renewing,
                )
        except Exception:
            for stream, renewed_at in zip(batch, renewed, strict=True):
                stream.state.dirty, stream.renewed_at = True, renewed_at  # retried next round
            raise
        for stream in batch:
            if (stream.wid, stream.gen) not in written:
                stream.end("taken over")  # by a stream elsewhere, or the session is gone


def round_interval(base_s: float, streams: int, scan_per_s: int) -> float:
    """Seconds between two rounds that each look at every one of ``streams``: ``base_s``, or
    longer when that would look at more than ``scan_per_s`` streams a second."""
    return max(base_s, streams / scan_per_s)


def _batches(streams: list[WatchStream]) -> list[list[WatchStream]]:
    return [streams[i : i + BATCH_ROWS] for i in range(0, len(streams), BATCH_ROWS)]


async def cursor_flusher(app: web.Application) -> None:
    """Flush every ``cursor_flush_ms`` (less often with more than ``FLUSH_SCAN_PER_S`` times
    that many streams); each stream's lease is renewed every third of ``LEASE_S``. Cancelled
    (on shutdown), it makes the final writes of the streams that ended."""
    base = app[SETTINGS].cursor_flush_ms / 1000
    rows = max(1, int(FLUSH_ROWS_PER_S * base))
    try:
        while True:
            interval = round_interval(base, len(app[STREAMS]), FLUSH_SCAN_PER_S)
            rows = max(1, int(FLUSH_ROWS_PER_S * interval))
            await asyncio.sleep(interval)
            try:
                await flush(app, rows)
            except Exception as exc:
                log.warning("cursor flush failed (will retry): %s", exc)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await flush(app, rows)
        raise


async def sweep(streams: set[WatchStream], write_timeout_s: float) -> None:
    """``WatchStream.check`` every open stream, ``SCAN_SLICE`` of them a turn of the loop."""
    now = time.monotonic()
    for i, stream in enumerate(list(streams), 1):
        if not stream.closed:
            stream.check(now, write_timeout_s)
        if i % SCAN_SLICE == 0:
            await asyncio.sleep(0)


async def sweeper(app: web.Application) -> None:
    """Look at every open stream each ``SWEEP_S`` (less often with more than
    ``SWEEP_SCAN_PER_S`` times that many streams), or each quarter of the write timeout if
    that is sooner."""
    timeout = app[SETTINGS].write_timeout_s
    while True:
        interval = min(round_interval(SWEEP_S, len(app[STREAMS]), SWEEP_SCAN_PER_S), timeout / 4)
        await asyncio.sleep(interval)
        await sweep(app[STREAMS], timeout)
        app[METRICS].flush_frames()  # other workers' scrapes see this worker's frames


class Releases:
    """Answers this process gives to takeovers asked elsewhere, and their tasks."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.tasks: set[asyncio.Task] = set()

    def asked(self, wid: str) -> None:
        """Another process takes ``wid`` over: its streams here end now (their cursors are
        what they handed to the socket) and the newest one's are stored."""
        held = [s for s in self.app[STREAMS] if s.wid == wid]
        if not held:
            return
        for stream in held:
            stream.end("taken over")
        newest = max(held, key=lambda s: s.gen)
        task = asyncio.create_task(self._release(newest), name="release")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _release(self, stream: WatchStream) -> None:
        try:
            async with self.app[POOL].connection() as conn:
                await sessions.release(conn, stream.wid, stream.gen, dict(stream.state.cursors))
        except Exception as exc:  # the takeover proceeds after its bound; the flusher retries
            log.warning("stream %s: release for a takeover failed: %s", stream.wid, exc)

    async def aclose(self) -> None:
        await stop_tasks(list(self.tasks))
