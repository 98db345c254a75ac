"""One shared tailer per topic per process, woken by ``NOTIFY``, fanning out to its streams.

The ``Hub`` (``engine.hub``) owns the LISTEN connection and the tailers. A ``Tailer`` reads
new records once into a contiguous cache of pre-encoded records, bounded in bytes across the
process (``cache_limit``), pushes them to the streams live at its tail (``engine.fanout``) and
wakes every other subscriber: those take pages from the cache, or page through PostgreSQL when
they are behind it. ``durable_head`` trails ``head`` until the WAL holding those commits is
flushed, which is what ``consistency: strong`` delivers up to.

A source that goes back (a failover to a lagging replica, a restore) writes seqs the cache
holds again, with other content. The tailer suspects it when a head below its own is read, when
an append or a notice names a cached seq with another ``$ts``, and after the LISTEN connection
was lost; it then compares its cache with PostgreSQL, keeps what still matches and records
the point the source went back to (``rewound_to``): its subscribers check their cursors against
it (``rewinds_since``) before they deliver anything more.

A tailer's refresh task is cancelled when its last subscriber leaves (``close``), and
``Hub.aclose`` cancels and awaits whatever is left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from watch_service.engine.fanout import Flags, LiveSet, LiveSink
from watch_service.protocol.paging import build_page
from watch_service.protocol.records import Record, encode
from watch_service.protocol.requests import NewRecord
from watch_service.protocol.tombstones import missed_range
from watch_service.store import tail
from watch_service.store.topics import AppendResult

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

log = logging.getLogger("auditsync.tailer")

CACHE_RECORDS = 8192
CACHE_BYTES = 64 * 1024 * 1024  # the default byte bound of all tailers' caches together
REFRESH_PAGE = 2000
ITEM_OVERHEAD = 200  # bytes an item costs besides its strings (objects, dict, list slot)
STR_OVERHEAD = 49  # bytes of a str object besides its characters (ASCII)
Wake = Callable[[str], None]


class CachedRecord:
    """A record of the cache with its encodings, made once per set of watch flags. Pages
    from the cache carry these items themselves (``seq`` and ``node`` as a record's), not
    copies: a page is built once per subscriber per wake-up."""

    __slots__ = ("encodings", "node", "rec", "seq", "size")

    def __init__(self, rec: Record) -> None:
        self.rec, self.seq, self.node = rec, rec.seq, rec.node
        self.encodings: dict[Flags, str] = {}
        # What the item holds, in bytes (characters: the payloads are ASCII-escaped JSON text
        # as often as not); it grows with each encoding made.
        self.size = ITEM_OVERHEAD + sum(
            len(v) + STR_OVERHEAD for v in (rec.data, rec.meta, rec.tag, rec.node) if v
        )


def cache_encoder(flags: Flags, grew: Callable[[int], None]) -> Callable[[CachedRecord], str]:
    """The encoding of a cached record under ``flags``, made on first use and kept; ``grew``
    is told the bytes each new encoding adds."""
    meta, tags, data = flags

    def encoded(item: CachedRecord) -> str:
        enc = item.encodings.get(flags)
        if enc is None:
            enc = item.encodings[flags] = encode(
                item.rec, include_meta=meta, include_tags=tags, include_data=data
            )
            added = len(enc) + STR_OVERHEAD
            item.size += added
            grew(added)
        return enc

    return encoded


class TailerHost(Protocol):
    """What a tailer uses of the hub that owns it (``engine.hub.Hub``), handed in when the hub
    makes it: the pool it reads through, the byte budget all tailers' caches share, the wait
    for a WAL flush and the observer of its pushes. The tailer never imports the hub."""

    pool: AsyncConnectionPool
    cache_limit: int
    cache_total: int

    def cache_grew(self, added: int) -> None: ...
    def cache_bounded(self) -> None: ...
    def await_flush(self, tailer: Tailer, lsn: int, head: int) -> None: ...
    def pushed(self, newest_ts_ms: int, frames: int) -> None: ...


class Tailer:
    def __init__(self, hub: TailerHost, topic: str) -> None:
        self.hub, self.topic = hub, topic
        self.head = -1  # newest seq known committed
        self.durable_head = -1  # newest seq whose commit is flushed
        self.earliest = 1
        self.deleted = False
        # When news of the topic last came (a NOTIFY, or this process's own append): the
        # safety poll reads the heads of the topics heard of within its period no more.
        self.heard_at = time.monotonic()
        self.cache: list[CachedRecord] = []
        self.cache_after: int | None = None  # cache holds seqs cache_after+1 .. cache_end
        self.cache_bytes = 0  # what the cache holds (``CachedRecord.size`` summed)
        self.subs: set[Wake] = set()  # every subscriber: the tailer lives while there is one
        self.asleep: set[Wake] = set()  # the subscribers woken on news: all but the live ones
        self.strong_subs = 0  # subscribers with consistency "strong"
        self.live = LiveSet(self._woken)  # streams at the tail: pushed to, not woken
        self._task: asyncio.Task | None = None
        self._again = False
        # Records offered while the task pushes or reads: taken and pushed by it once it is
        # done, all in one push (at most ``_queue_limit`` bytes; past it, read instead).
        self._queued: list[CachedRecord] = []
        self._queued_bytes = 0
        self._offering = False
        self._suspect = False  # the next refresh compares the cache with PostgreSQL first
        self.rewound_to: list[int] = []  # the heads the source went back to, in order
        self.reads = 0  # refresh reads made (a test counts them to catch a spinning tailer)

    @property
    def cache_end(self) -> int | None:
        return None if self.cache_after is None else self.cache_after + len(self.cache)

    def cached(
        self, after: int, limit: int, max_bytes: int, flags: Flags, upto: int
    ) -> list[tuple[CachedRecord, str]] | None:
        """The page after ``after`` (≤ upto) from the cache, or None if the cache cannot say:
        the topic is deleted, seqs after ``after`` are no longer retained, they are older
        than the cache, or ``after`` is above the head (the source went back, or this tailer
        has not heard of the newest records yet). The caller then reads PostgreSQL, which
        knows."""
        if (
            self.deleted
            or after > self.head
            or missed_range(after, self.earliest) is not None
            or self.cache_after is None
            or after < self.cache_after
        ):
            return None
        start = after - self.cache_after
        page = build_page(
            self.cache[start : start + limit],
            self.encoder(flags),
            limit=limit,
            max_bytes=max_bytes,
            upto=upto,
        )
        self._bound()
        return page

    def encoder(self, flags: Flags) -> Callable[[CachedRecord], str]:
        """``cache_encoder`` whose new encodings count in the cache's bytes."""
        return cache_encoder(flags, self._grew)

    def _grew(self, added: int) -> None:
        self.cache_bytes += added
        self.hub.cache_grew(added)

    def _extend(self, fresh: list[CachedRecord]) -> None:
        """``fresh`` (the records right after the cache) joins it, its bytes counted."""
        self.cache.extend(fresh)
        self._grew(sum(item.size for item in fresh))

    def _bound(self) -> None:
        """Drop the oldest cached records while the caches hold more than their byte bound (or
        this one more than ``CACHE_RECORDS``): only this cache grew, so only it shrinks."""
        over = self.hub.cache_total - self.hub.cache_limit
        drop, freed = max(0, len(self.cache) - CACHE_RECORDS), 0
        for item in self.cache[:drop]:
            freed += item.size
        while drop < len(self.cache) and freed < over:
            freed += self.cache[drop].size
            drop += 1
        if drop:
            del self.cache[:drop]
            assert self.cache_after is not None
            self.cache_after += drop
            self._grew(-freed)
        self.hub.cache_bounded()

    def join(self, sink: LiveSink) -> bool:
        """Push to ``sink`` from now on if it is at the cache's end (else False: it pages)."""
        end = self.cache_end
        if self.deleted or end is None:
            return False
        self.live.join(sink, self.topic, end)
        self.asleep.discard(sink.wake)
        return True

    def leave(self, sink: LiveSink) -> None:
        self.live.leave(sink)
        self._woken(sink)

    def _woken(self, sink: LiveSink) -> None:
        """``sink`` left the live set: wake it on news again (if it still subscribes)."""
        if sink.wake in self.subs:
            self.asleep.add(sink.wake)

    def rewinds_since(self, seen: int) -> tuple[int, int | None]:
        """(how many rewinds there have been, the lowest head the source went back to among
        those after the first ``seen``, or None)."""
        later = self.rewound_to[seen:]
        return len(self.rewound_to), min(later) if later else None

    def rewritten(self, seq: int, ts: int) -> bool:
        """Whether the cache holds ``seq`` with another ``$ts`` than the source just wrote it
        with: the source went back and wrote it again."""
        if self.cache_after is None or not self.cache_after < seq <= self.cache_after + len(
            self.cache
        ):
            return False
        return self.cache[seq - self.cache_after - 1].rec.ts != ts

    def suspect(self) -> None:
        """The source may have gone back: the next refresh checks the cache against it."""
        self._suspect = True
        self.kick()

    def noticed(self, head: int, ts: int | None) -> None:
        """A notice of an append up to ``head`` (at ``ts``, when the notice says)."""
        if ts is not None and self.rewritten(head, ts):
            self.suspect()
        else:
            self.kick(head)

    def kick(self, head: int | None = None) -> None:
        if head is not None and head <= self.head and self.cache_after is not None:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run([], 0, True), name=f"tailer:{self.topic}")
        else:
            self._again = True

    def on_deleted(self, head: int) -> None:
        self.deleted, self.head, self.durable_head = True, head, head
        self._reset(head)
        self._wake()

    def _reset(self, cache_after: int) -> None:
        """Restart the cache empty after ``cache_after``; live streams page on their own (a
        tombstone or a deletion frame comes first)."""
        self._grew(-self.cache_bytes)
        self.cache, self.cache_after = [], cache_after
        self._queued, self._queued_bytes = [], 0
        self.live.drop_all(self.topic)

    def close(self) -> asyncio.Task | None:
        """The last subscriber left: stop refreshing. Returns the cancelled task, if any."""
        self._grew(-self.cache_bytes)
        self.cache, self.cache_after = [], None
        self._queued, self._queued_bytes = [], 0
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            return task
        return None

    def on_trimmed(self, earliest: int) -> None:
        """Retention moved the topic's start: streams paging behind it get their tombstone."""
        if earliest > self.earliest:
            self.earliest = earliest
            self._wake()

    def on_created(self) -> None:
        self.deleted = False
        self.kick()

    def _wake(self) -> None:
        for wake in tuple(self.asleep):
            wake(self.topic)

    async def _refresh_once(self) -> bool:
        self.reads += 1
        async with self.hub.pool.connection() as conn:
            if self.cache_after is None:
                page = await tail.read_tail(conn, self.topic, 2**62, 1)
                if page is None:
                    return False
                self.cache_after = after = page.head_seq
                fresh: list[CachedRecord] = []
                lost, kept = False, None
            else:
                kept = await self._kept(conn) if self._suspect else None
                after = self.cache_after + len(self.cache) if kept is None else kept
                page = await tail.read_tail(conn, self.topic, after, self._page_limit())
                if page is None:
                    return False
                if kept is None and not page.deleted and page.head_seq < after:
                    kept = await self._kept(conn)  # the source went back below the cache
                    after = page.head_seq if kept is None else min(kept, page.head_seq)
                    kept = after
                    page = await tail.read_tail(conn, self.topic, after, self._page_limit())
                    if page is None:
                        return False
                if kept is not None:  # no await from here on: subscribers see it all at once
                    self._went_back(kept)
                fresh = [CachedRecord(r) for r in page.records]
                # Records after the cache are gone: trimmed or recreated past it (the cache
                # restarts at the next record), or every one of them trimmed (it restarts at
                # the head: re-reading the same empty range would spin).
                lost = fresh[0].seq != after + 1 if fresh else page.head_seq > after
                if lost:
                    self._reset(fresh[0].seq - 1 if fresh else page.head_seq)
                after = self.cache_after + len(self.cache)
                self._extend(fresh)  # with cache_after, before any await: readers see both
        self.earliest = page.earliest_seq
        was_deleted, self.deleted = self.deleted, page.deleted
        seen = self.cache_after + len(self.cache)
        self.head = max(self.head, seen if not page.deleted else page.head_seq)
        if page.flush_lsn >= page.insert_lsn:
            self.durable_head = self.head
        else:
            self.hub.await_flush(self, page.insert_lsn, self.head)
        if page.deleted:
            self.live.drop_all(self.topic)
        await self._deliver(fresh, after)
        if (
            fresh
            or lost
            or kept is not None
            or was_deleted != self.deleted
            or self.durable_head == self.head
        ):
            self._wake()
        return bool(fresh) and page.head_seq > seen

    async def _kept(self, conn: AsyncConnection) -> int | None:
        """Where the cache and PostgreSQL part, if they do: the last cached seq the source
        still holds as cached (the source went back and maybe wrote the later ones again)."""
        self._suspect = False
        if self.cache_after is None or not self.cache:
            return None
        # The source still holding the newest cached record as cached holds every older one
        # (it cannot have gone back below it without losing or rewriting it): one row decides.
        end = self.cache_after + len(self.cache)
        last = await tail.read_tail(conn, self.topic, end - 1, 1)
        if last is not None and last.records and last.records[0] == self.cache[-1].rec:
            return None
        check = await tail.read_tail(conn, self.topic, self.cache_after, len(self.cache))
        if check is None or check.deleted:
            return None
        kept = self.cache_after
        for item, rec in zip(self.cache, check.records, strict=False):
            if item.rec != rec:
                break
            kept = item.seq
        return kept if kept < self.cache_after + len(self.cache) else None

    def _went_back(self, kept: int) -> None:
        """The source went back to ``kept``: the cache restarts there, the live streams page
        on their own, and every subscriber checks its cursor against it (``rewinds_since``)."""
        log.warning(
            "topic %s went back: seqs after %d are no longer what was delivered", self.topic, kept
        )
        self._reset(kept)
        self.head, self.durable_head = kept, min(self.durable_head, kept)
        self.rewound_to.append(kept)

    async def _deliver(self, fresh: list[CachedRecord], after: int) -> None:
        """Push ``fresh`` (the records after ``after``, now cached) to the live streams."""
        if fresh and self.live:
            frames = await self.live.push(
                self.topic, fresh, after, self.head, self.head, self.encoder
            )
            self.hub.pushed(fresh[-1].rec.ts, frames)
        self._bound()

    def offer(self, result: AppendResult, records: Sequence[NewRecord]) -> None:
        """Records this process has just committed, as they were sent: cached and pushed
        without reading them back. Otherwise the tailer reads them (the append's ``NOTIFY`` is
        skipped for this). While the tailer's task is under way (a push or a read), offered
        records wait in ``_queued`` if they follow one another, and the task takes those that
        follow its cache once it is done, all in one push (one write per stream); those a read
        meanwhile got are dropped, so an append during a read costs no read of its own.
        ``durable_head`` is left to reads: a fast path is only taken with no strong subscriber,
        and the first one to subscribe has the tailer read (``Hub.subscribe``)."""
        if self.rewritten(result.last_seq, result.ts):
            self.suspect()
            return
        busy = self._task is not None and not self._task.done()
        if busy and self._queued:
            end: int | None = self._queued[-1].seq
        elif busy and not self._offering:
            end = result.first_seq - 1  # a read under way: the cache's end moves when it is done
        else:
            end = self.cache_end
        if self.deleted or self.strong_subs or end != result.first_seq - 1:
            self.kick(result.last_seq)
            return
        after = result.first_seq - 1
        fresh = [
            CachedRecord(Record(after + i, result.ts, r.tag, r.node, r.meta, r.data))
            for i, r in enumerate(records, 1)
        ]
        self.earliest = max(self.earliest, result.earliest_seq)  # a trim's notice may be ahead
        if busy:
            self._queued += fresh
            self._queued_bytes += sum(item.size for item in fresh)
            if self._queued_bytes > self._queue_limit():  # a long read: read them after it
                self._queued, self._queued_bytes = [], 0
                self.kick()
            return
        self._take(fresh)
        self._task = asyncio.create_task(self._run(fresh, after), name=f"tailer:{self.topic}")

    def _take(self, fresh: list[CachedRecord]) -> None:
        """Offered records join the cache, and the head moves to them: no await between."""
        self._extend(fresh)
        self.head = max(self.head, fresh[-1].seq)

    def _take_queued(self) -> list[CachedRecord]:
        """The queued records that follow the cache, taken (those a read got meanwhile are
        dropped); if the rest do not follow it (the cache restarted), the tailer reads them."""
        queued, self._queued, self._queued_bytes = self._queued, [], 0
        end = self.cache_end
        if not queued or end is None or self.deleted:
            self._again = self._again or bool(queued)
            return []
        queued = queued[end - queued[0].seq + 1 :] if queued[0].seq <= end else queued
        if queued and queued[0].seq != end + 1:
            self._again = True
            return []
        if queued:
            self._take(queued)
        return queued

    async def _run(self, fresh: list[CachedRecord], after: int, read: bool = False) -> None:
        """The tailer's one task: push ``fresh`` (taken, after ``after``), then what was
        offered meanwhile, in one push; read when asked (``read``, or a kick: ``_again``)
        until the cache holds the head; return when there is nothing left to do."""
        try:
            while True:
                end = self.cache_end or 0
                queued = self._take_queued()  # offered before this push starts: they join it
                fresh, after = ([*fresh, *queued], after) if fresh else (queued, end)
                if fresh:
                    self._offering = True
                    await self._deliver(fresh, after)
                    self._wake()
                    self._offering = False
                    fresh = []
                    continue
                if not (read or self._again):
                    return
                self._again = False
                read = await self._refresh_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the safety poll retries; streams keep their cursors
            log.warning("tailer %s refresh or push failed: %s", self.topic, exc)
        finally:
            self._offering = False
            self._queued, self._queued_bytes = [], 0

    def _queue_limit(self) -> int:
        """Bytes of offered records that may wait for the tailer's task: an eighth of the
        caches' bound, as a read holds at most (``_page_limit``)."""
        return self.hub.cache_limit // 8

    def _page_limit(self) -> int:
        """Records per refresh read: ``REFRESH_PAGE``, fewer when records are large, so one
        read holds at most about an eighth of the cache bound."""
        if not self.cache:
            return REFRESH_PAGE
        last = self.cache[-1].size
        return max(1, min(REFRESH_PAGE, self.hub.cache_limit // 8 // max(last, 1)))

    def mark_durable(self, head: int) -> None:
        if head > self.durable_head:
            self.durable_head = head
            self._wake()
