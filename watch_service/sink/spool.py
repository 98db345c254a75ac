"""The sink's spool: frames received but not yet durable, and the commit that makes them so.

``add`` turns a data frame into landing rows (with fault injection) and moves the live
position (frame_no, cursor map, resume id). A topic's cursor moves backwards only when a
``rewound`` frame says its source went back (to the head that frame's id names). Otherwise it
never does: when the
server re-sends what is already here (after its own restart it resumes from the cursors it had
persisted, which may be behind ours), every re-sent record is recognised, counted and logged,
and neither the resume id nor ``state.json`` regresses. ``flush`` commits the buffer in this
order, each step durable before the next starts:

1. new fault decisions → ``faults/part-<first>-<last>.jsonl``;
2. rows → segment ``<YYYY-MM-DD>/<HH>/part-<first>-<last>.parquet``;
3. resume state → ``state.json``;

each one whole object (see ``landing.py``: temp, fsync, rename on a local disk; one PUT on
object storage),

and hands the segment's records to the :class:`~watch_service.sink.indexer.Indexer`, which
upserts them into the search index in the background (never ahead of the landing).

A crash anywhere costs nothing: on restart the ``Last-Event-ID`` sent is the last id durable
here (step 3's, or the newest segment's footer if the crash fell between 2 and 3), and the
server rewinds to it and re-delivers whatever was buffered.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol.landing import COLUMN_NAMES, KIND_RECORD
from watch_service.protocol.redelivery import REISSUED, describe
from watch_service.sink.config import SinkConfig
from watch_service.sink.connection import Frame
from watch_service.sink.faults import FaultBook
from watch_service.sink.indexer import Indexer
from watch_service.sink.landing import Landing, SinkState
from watch_service.sink.progress import Stats
from watch_service.sink.redelivery import Redeliveries
from watch_service.sink.rows import INDEX_COLUMNS, FrameContext, advance, frame_rows, index_ops

log = logging.getLogger("auditsync.sink")

_INDEX_COLUMNS = operator.itemgetter(*(COLUMN_NAMES.index(c) for c in INDEX_COLUMNS))
_COPY = operator.itemgetter(*(COLUMN_NAMES.index(c) for c in ("seq", "ts", "data_sha256")))


class Spool:
    def __init__(
        self,
        cfg: SinkConfig,
        landing: Landing,
        state: SinkState,
        stats: Stats,
        indexer: Indexer | None,
    ) -> None:
        self.cfg, self.landing, self.state, self.stats = cfg, landing, state, stats
        self.indexer = indexer
        self.book = FaultBook(cfg.faults, landing.load_faults()) if cfg.faults.enabled else None
        stats.cursors = self.cursors = dict(self.state.cursors)
        self.frame_no, self.last_id = self.state.frame_no, self.state.last_id
        self._rows: list[tuple] = []
        self._first_frame_no: int | None = None
        self._before_id = self.last_id  # the frame id in force before the buffer's first frame
        self._buffered_at = 0.0
        self.redeliveries = Redeliveries()

    def start_session(self, wid: str, start: dict[str, int]) -> None:
        """Adopt a new session: its topics' cursors are the start map's, except where ours are
        already further (never backwards)."""
        known = dict(self.cursors)
        self.cursors.clear()
        self.cursors.update(start)
        advance(self.cursors, {t: c for t, c in known.items() if t in start})
        self.last_id = cursor_codec.encode(self.cursors)
        s = self.state
        s.wid, s.topics, s.node = wid, list(self.cfg.topics), self.cfg.node
        s.last_id, s.cursors = self.last_id, dict(self.cursors)

    def add(self, frame: Frame) -> None:
        """Buffer one data frame; raises ValueError (or FrameError) if it is malformed."""
        ctx = FrameContext(
            self.cfg.consumer, self.cfg.node, self.frame_no + 1, frame.id, frame.received_ms
        )
        landed = frame_rows(
            frame.event,
            frame.data,
            ctx,
            self.cursors,
            self.book.fate if self.book is not None else None,
        )
        if self._first_frame_no is None:
            self._first_frame_no, self._buffered_at = ctx.frame_no, time.monotonic()
            self._before_id = self.last_id
        self._rows.extend(landed.rows)
        if frame.event == KIND_RECORD:
            before, seen = self.cursors.get(landed.topic), self.redeliveries.observe
            for seq, ts, sha in map(_COPY, landed.rows):
                seen(landed.topic, seq, ts, sha, before, ctx.frame_no)
        ids = cursor_codec.decode(frame.id)
        if ids is None and landed.cursor is not None:
            ids = {landed.topic: landed.cursor}
        if ids and advance(self.cursors, ids, landed.topic if landed.rewound else None):
            self.last_id = cursor_codec.encode(self.cursors)
        if landed.rewound:
            log.warning(
                "source rewound: %s seqs %d-%d are written again; cursor back to %s (frame %d)",
                landed.topic,
                *landed.rewound,
                self.cursors.get(landed.topic),
                ctx.frame_no,
            )
        self.frame_no = ctx.frame_no
        s = self.stats
        if landed.head_seq is not None:
            s.heads[landed.topic] = landed.head_seq
        s.frames += 1
        s.records += landed.records
        s.dropped += landed.dropped
        s.corrupted += landed.corrupted
        if landed.duplicates:
            s.duplicates += landed.duplicates
            log.info(
                "re-delivered: %d record(s) of %s at or below its cursor (frame %d)",
                landed.duplicates,
                landed.topic,
                ctx.frame_no,
            )

    def wait_s(self) -> float:
        """How long the consumer may wait for more before a flush falls due."""
        if self._first_frame_no is None:
            return self.cfg.flush_ms / 1000
        return max(0.0, self._buffered_at + self.cfg.flush_ms / 1000 - time.monotonic())

    def due(self) -> bool:
        return self._first_frame_no is not None and (
            len(self._rows) >= self.cfg.flush_rows or self.wait_s() == 0.0
        )

    async def flush(self) -> None:
        if self._first_frame_no is None:
            return
        rows, first, last = self._rows, self._first_frame_no, self.frame_no
        self._rows, self._first_frame_no = [], None
        if self.book is not None and (new := self.book.take_new()):
            await asyncio.to_thread(self.landing.write_faults, new, first, last)
        cursors = dict(self.cursors)
        redelivered = self.redeliveries.take()
        for r, line in zip(redelivered, describe(self.cfg.consumer, redelivered), strict=True):
            (log.warning if r.verdict == REISSUED else log.info)("%s", line)
        await asyncio.to_thread(
            self.landing.write_segment,
            rows,
            first,
            last,
            self.last_id,
            cursors,
            self._before_id,
            redelivered,
        )
        self.stats.segments += 1
        self.stats.rows += len(rows)
        self.state.frame_no, self.state.last_id, self.state.cursors = last, self.last_id, cursors
        if self.indexer is not None:
            self.indexer.submit(first, last, index_ops(map(_INDEX_COLUMNS, rows)))
        await self.save()

    async def save(self) -> None:
        await asyncio.to_thread(self.landing.save_state_bytes, self.state.to_json())
