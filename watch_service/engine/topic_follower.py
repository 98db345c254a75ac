"""Follow one change topic from a seq: the delivery engine under the Permify and SpiceDB
watches, the same one the SSE watch uses (the process's shared ``Tailer``, woken by NOTIFY).

``follow`` yields pages of records in seq order, each record exactly once, and an empty page
whenever nothing arrived for ``idle_s`` (the caller's chance to send a checkpoint or notice a
gone client). It never skips: a cursor behind the topic's retention raises ``HistoryLost``,
a cursor above the topic's head (the source went back: a failover to a lagging replica, a
restore) raises ``SourceRewound``, a deleted topic raises ``TopicGone``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from psycopg_pool import AsyncConnectionPool

from watch_service.engine.hub import Hub
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.records import Record
from watch_service.protocol.tombstones import missed_range, rewound_range
from watch_service.store import tail

PAGE = 256
_FLAGS = (True, True, True)
_MAX_BYTES = 1 << 30  # pages are bounded by count; the cache is in memory anyway


class HistoryLost(AuditsyncError):
    """The cursor is before the retained history: seqs gap_from..gap_to are gone."""

    def __init__(self, gap_from: int, gap_to: int, earliest: int) -> None:
        super().__init__(f"changes {gap_from}..{gap_to} are no longer retained")
        self.gap_from, self.gap_to, self.earliest = gap_from, gap_to, earliest


class SourceRewound(AuditsyncError):
    """The cursor is above the topic's head: seqs gap_from..gap_to the caller was given are
    no longer the source's and are written again with other content."""

    def __init__(self, gap_from: int, gap_to: int, head: int) -> None:
        super().__init__(f"changes {gap_from}..{gap_to} are no longer the source's")
        self.gap_from, self.gap_to, self.head = gap_from, gap_to, head


class TopicGone(AuditsyncError):
    """The change topic (its tenant) was deleted."""


def ensure_retained(after: int, earliest_seq: int) -> None:
    """Raise ``HistoryLost`` if seqs after ``after`` are no longer retained: a watch never
    skips a gap silently."""
    missed = missed_range(after, earliest_seq)
    if missed is not None:
        raise HistoryLost(*missed, earliest_seq)


def ensure_not_rewound(after: int, head_seq: int) -> None:
    """Raise ``SourceRewound`` if ``after`` is above the head: a watch never resumes past
    changes its source no longer has, nor takes their rewrites for new ones, silently."""
    rewound = rewound_range(after, head_seq)
    if rewound is not None:
        raise SourceRewound(*rewound, head_seq)


async def follow(
    hub: Hub, pool: AsyncConnectionPool, topic: str, after: int, idle_s: float
) -> AsyncIterator[list[Record]]:
    wake = asyncio.Event()

    def on_wake(_topic: str) -> None:
        wake.set()

    tailer = hub.subscribe(topic, on_wake)
    seen = len(tailer.rewound_to)
    try:
        while True:
            wake.clear()  # before reading: a wake-up during the read is kept, not lost
            seen, went_back_to = tailer.rewinds_since(seen)
            if went_back_to is not None:
                ensure_not_rewound(after, went_back_to)
            cached = tailer.cached(after, PAGE, _MAX_BYTES, _FLAGS, tailer.head)
            if cached is not None:
                page = [item.rec for item, _ in cached]
            else:
                page = await _read(pool, topic, after)
            if page:
                after = page[-1].seq
                yield page
                continue
            try:
                await asyncio.wait_for(wake.wait(), idle_s)
            except TimeoutError:
                yield []
    finally:
        hub.unsubscribe(topic, on_wake)


async def _read(pool: AsyncConnectionPool, topic: str, after: int) -> list[Record]:
    async with pool.connection() as conn:
        page = await tail.read_tail(conn, topic, after, PAGE)
    if page is None or page.deleted:
        raise TopicGone(topic)
    ensure_not_rewound(after, page.head_seq)
    ensure_retained(after, page.earliest_seq)
    return page.records
