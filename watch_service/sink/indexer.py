"""Keeps the search index in step with the landing, off the landing's critical path.

The spool hands over each segment's records once the segment is durable; this task upserts
them in order and advances ``indexed_frame_no`` in the sink state, which the spool persists
with its next flush (and the sink at shutdown). A slow or unreachable PostgreSQL therefore
never holds up landing or acknowledging frames: the index just falls behind, retried every
:data:`RETRY_S`, and catches up by reading the durable segments back. Only segments it has
fully upserted are ever claimed, so after a crash the index is caught up from the landing
(the upsert is idempotent, so replaying a segment is harmless).

The index's database keeps its own mark of how far this consumer's documents reach
(``search_index_marks``), written after each segment. Before each segment the indexer reads
it: a restore or failover of that database takes documents and mark back together while this
sink's state survives, so a mark below ``indexed_frame_no`` means the index went back, and
the indexer re-indexes from the mark, reading the landing back (issue 32: without this the
documents the restore took away were never written again).
"""

from __future__ import annotations

import asyncio
import collections
import logging

import psycopg

from watch_service.sink.landing import Landing, SinkState
from watch_service.sink.progress import Stats
from watch_service.store.search_index import IndexOp, SearchIndex

log = logging.getLogger("auditsync.sink.index")

RETRY_S = 5.0
MAX_PENDING = 8  # segments kept in memory; beyond that they are read back from the landing


class Indexer:
    def __init__(
        self, index: SearchIndex, landing: Landing, state: SinkState, stats: Stats
    ) -> None:
        self.index, self.landing, self.state, self.stats = index, landing, state, stats
        self._pending: collections.deque[tuple[int, int, list[IndexOp] | None]] = (
            collections.deque()
        )
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._failing = False

    def submit(self, first_frame_no: int, last_frame_no: int, records: list[IndexOp]) -> None:
        """Queue a durable segment's index operations (``rows.index_ops``: its records and
        rewound ranges, in order), dropped from memory if the queue is long."""
        keep = records if len(self._pending) < MAX_PENDING else None
        self._pending.append((first_frame_no, last_frame_no, keep))
        self._idle.clear()
        self._wake.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until everything submitted is indexed; False at once if the database is
        failing, or if that takes longer than ``timeout_s``."""
        if self._failing:
            return False
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Catch up from the landing, then index segments as they are submitted."""
        while not await self._catch_up():  # noqa: ASYNC110 - a timed retry after a failed catch-up, not a wait on state
            await asyncio.sleep(RETRY_S)
        while True:
            if not self._pending:
                self._idle.set()
                await self._wake.wait()
                self._wake.clear()
                continue
            first, last, records = self._pending[0]
            if not await self._check_mark():
                await asyncio.sleep(RETRY_S)
            elif last <= self.state.indexed_frame_no:
                self._pending.popleft()
            elif records is not None and first == self.state.indexed_frame_no + 1:
                if await self._upsert(records, last):
                    self._pending.popleft()
                else:
                    await asyncio.sleep(RETRY_S)
            elif await self._catch_up():
                if self.state.indexed_frame_no < last:
                    log.warning(
                        "frames %d-%d are no longer in the landing; the backfill "
                        "repairs the index for them",
                        first,
                        last,
                    )
                    self.state.indexed_frame_no = last
                self._pending.popleft()
            else:
                await asyncio.sleep(RETRY_S)

    def _unavailable(self, exc: psycopg.OperationalError) -> None:
        self._failing = True
        self.stats.index_errors += 1
        log.warning(
            "search index unavailable (%s); retrying in %.0fs, catching up from the landing",
            str(exc).strip(),
            RETRY_S,
        )

    async def _check_mark(self) -> bool:
        """Lower ``indexed_frame_no`` to the index's own mark when the index went back;
        False on a database error."""
        try:
            held = await self.index.mark(self.landing.consumer)
        except psycopg.OperationalError as exc:
            self._unavailable(exc)
            return False
        if held is not None and held < self.state.indexed_frame_no:
            log.warning(
                "the search index went back to frame %d (indexed through %d here): "
                "re-indexing from the landing",
                held,
                self.state.indexed_frame_no,
            )
            self.stats.index_rewinds += 1
            self.state.indexed_frame_no = held
        return True

    async def _upsert(self, records: list[IndexOp], through_frame_no: int) -> bool:
        try:
            self.stats.indexed_docs += await self.index.apply(records)
            await self.index.set_mark(self.landing.consumer, through_frame_no)
        except psycopg.OperationalError as exc:
            self._unavailable(exc)
            return False
        self._failing = False
        self.state.indexed_frame_no = through_frame_no
        return True

    async def _catch_up(self) -> bool:
        """Upsert every durable segment the index has not seen; False on a database error."""
        if not await self._check_mark():
            return False
        after = self.state.indexed_frame_no
        for seg in await asyncio.to_thread(self.landing.segments_after, after):
            if seg.first_frame_no > self.state.indexed_frame_no + 1:
                log.warning(
                    "frames %d-%d are no longer in the landing; the backfill repairs "
                    "the index for them",
                    self.state.indexed_frame_no + 1,
                    seg.first_frame_no - 1,
                )
            records = await asyncio.to_thread(self.landing.segment_index_ops, seg.name)
            if not await self._upsert(records, seg.last_frame_no):
                return False
        return True
