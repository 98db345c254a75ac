"""One shared tailer per topic per process, woken by ``NOTIFY``, fanning out to its streams.

The ``Hub`` owns the LISTEN connection (outside the pool) and the tailers. A ``Tailer`` reads
new records once into a bounded, contiguous cache of pre-encoded records and wakes every
subscriber; subscribers at the tail take pages from the cache, subscribers behind it page
through PostgreSQL themselves. ``durable_head`` trails ``head`` until the WAL holding those
commits is flushed, which is what ``consistency: strong`` delivers up to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg
from psycopg_pool import AsyncConnectionPool

from watch_service.protocol.paging import build_page
from watch_service.protocol.records import Record, encode
from watch_service.protocol.tombstones import missed_range
from watch_service.store import tail
from watch_service.store.topics import CHANNEL

log = logging.getLogger("auditsync.tailer")

CACHE_RECORDS = 8192
REFRESH_PAGE = 2000
SAFETY_POLL_S = 2.0
Wake = Callable[[str], None]


Flags = tuple[bool, bool, bool]  # a watch's (include_meta, include_tags, include_data)


class CachedRecord:
    """A record of the cache with its encodings, made once per set of watch flags. Pages
    from the cache carry these items themselves (``seq`` and ``node`` as a record's), not
    copies: a page is built once per subscriber per wake-up."""

    __slots__ = ("encodings", "node", "rec", "seq")

    def __init__(self, rec: Record) -> None:
        self.rec, self.seq, self.node = rec, rec.seq, rec.node
        self.encodings: dict[Flags, str] = {}


def cache_encoder(flags: Flags) -> Callable[[CachedRecord], str]:
    """The encoding of a cached record under ``flags``, made on first use and kept."""
    meta, tags, data = flags

    def encoded(item: CachedRecord) -> str:
        enc = item.encodings.get(flags)
        if enc is None:
            enc = item.encodings[flags] = encode(
                item.rec, include_meta=meta, include_tags=tags, include_data=data
            )
        return enc

    return encoded


class Tailer:
    def __init__(self, hub: Hub, topic: str) -> None:
        self.hub, self.topic = hub, topic
        self.head = -1  # newest seq known committed
        self.durable_head = -1  # newest seq whose commit is flushed
        self.earliest = 1
        self.deleted = False
        self.cache: list[CachedRecord] = []
        self.cache_after: int | None = None  # cache holds seqs cache_after+1 .. cache_end
        self.subs: set[Wake] = set()
        self.strong_subs = 0  # subscribers with consistency "strong"
        self._task: asyncio.Task | None = None
        self._again = False

    @property
    def cache_end(self) -> int | None:
        return None if self.cache_after is None else self.cache_after + len(self.cache)

    def cached(
        self, after: int, limit: int, max_bytes: int, flags: Flags, upto: int
    ) -> list[tuple[CachedRecord, str]] | None:
        """The page after ``after`` (≤ upto) from the cache, or None if the cache cannot say:
        the topic is deleted, seqs after ``after`` are no longer retained, or they are older
        than the cache. The caller then reads PostgreSQL, which knows."""
        if (
            self.deleted
            or missed_range(after, self.earliest) is not None
            or self.cache_after is None
            or after < self.cache_after
        ):
            return None
        start = after - self.cache_after
        return build_page(
            self.cache[start : start + limit],
            cache_encoder(flags),
            limit=limit,
            max_bytes=max_bytes,
            upto=upto,
        )

    def kick(self, head: int | None = None) -> None:
        if head is not None and head <= self.head and self.cache_after is not None:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._refresh(), name=f"tailer:{self.topic}")
        else:
            self._again = True

    def on_deleted(self, head: int) -> None:
        self.deleted, self.head, self.durable_head = True, head, head
        self.cache, self.cache_after = [], head
        self._wake()

    def on_created(self) -> None:
        self.deleted = False
        self.kick()

    def _wake(self) -> None:
        for wake in tuple(self.subs):
            wake(self.topic)

    async def _refresh(self) -> None:
        try:
            while True:
                self._again = False
                more = await self._refresh_once()
                if not more and not self._again:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the safety poll retries; streams keep their cursors
            log.warning("tailer %s refresh failed: %s", self.topic, exc)

    async def _refresh_once(self) -> bool:
        async with self.hub.pool.connection() as conn:
            if self.cache_after is None:
                page = await tail.read_tail(conn, self.topic, 2**62, 1)
                if page is None:
                    return False
                cache_after = page.head_seq
            else:
                after = self.cache_after + len(self.cache)
                page = await tail.read_tail(conn, self.topic, after, REFRESH_PAGE)
                if page is None:
                    return False
                cache_after = self.cache_after
                if page.records and page.records[0].seq != after + 1:
                    # Trimmed or recreated past the cache: restart the cache at the new records.
                    self.cache, cache_after = [], page.records[0].seq - 1
                self.cache.extend(CachedRecord(r) for r in page.records)
                if len(self.cache) > CACHE_RECORDS:
                    drop = len(self.cache) - CACHE_RECORDS
                    del self.cache[:drop]
                    cache_after += drop
            self.cache_after = cache_after  # with the cache, before any await: readers see both
        self.earliest = page.earliest_seq
        was_deleted, self.deleted = self.deleted, page.deleted
        seen = self.cache_after + len(self.cache)
        self.head = max(self.head, seen if not page.deleted else page.head_seq)
        if page.flush_lsn >= page.insert_lsn:
            self.durable_head = self.head
        else:
            self.hub.await_flush(self, page.insert_lsn, self.head)
        if page.records or was_deleted != self.deleted or self.durable_head == self.head:
            self._wake()
        return len(page.records) >= REFRESH_PAGE or page.head_seq > seen

    def mark_durable(self, head: int) -> None:
        if head > self.durable_head:
            self.durable_head = head
            self._wake()


class Hub:
    """The LISTEN connection and the per-topic tailers of this process."""

    def __init__(self, pool: AsyncConnectionPool, db_url: str) -> None:
        self.pool, self.db_url = pool, db_url
        self.tailers: dict[str, Tailer] = {}
        self._flush_waits: list[tuple[Tailer, int, int]] = []
        self._flush_task: asyncio.Task | None = None

    def subscribe(self, topic: str, wake: Wake, strong: bool = False) -> Tailer:
        tailer = self.tailers.get(topic)
        if tailer is None:
            tailer = self.tailers[topic] = Tailer(self, topic)
            tailer.kick()
        tailer.subs.add(wake)
        tailer.strong_subs += strong
        return tailer

    def unsubscribe(self, topic: str, wake: Wake, strong: bool = False) -> None:
        tailer = self.tailers.get(topic)
        if tailer is not None:
            if wake in tailer.subs:
                tailer.strong_subs -= strong
            tailer.subs.discard(wake)
            if not tailer.subs:
                del self.tailers[topic]

    def dispatch(self, payload: str) -> None:
        kind, head, topic = payload.split(" ", 2)
        tailer = self.tailers.get(topic)
        if tailer is None:
            return
        if kind == "a":
            tailer.kick(int(head))
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
        """LISTEN forever, reconnecting; after any reconnect every tailer re-reads."""
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.db_url, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    for tailer in self.tailers.values():
                        tailer.kick()
                    async for note in conn.notifies():
                        self.dispatch(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN connection lost (%s); reconnecting", exc)
                await asyncio.sleep(0.5)

    async def safety_poll(self) -> None:
        """Re-check heads periodically, in case a notification was lost with a connection."""
        while True:
            await asyncio.sleep(SAFETY_POLL_S)
            if not self.tailers:
                continue
            with contextlib.suppress(Exception):
                async with self.pool.connection() as conn:
                    heads = await tail.topic_heads(conn, list(self.tailers))
                    for name, head in heads.items():
                        if name in self.tailers and head > self.tailers[name].head:
                            self.tailers[name].kick(head)
