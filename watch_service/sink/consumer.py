"""The sink's connection loop: session → stream → spool → reconnect.

It drives one :class:`~watch_service.sink.client.WatchClient` (the project's SSE client): the
session's wid is persisted in the sink state and reused after a restart; a session the server
reclaimed is re-created from the persisted cursors. Data frames go to the
:class:`~watch_service.sink.spool.Spool`, which is flushed on its schedule and before every
reconnect, so the ``Last-Event-ID`` sent is always the last id that is durable here. Reconnect
timing is the client's (backoff from the server's ``retry:``, jitter, cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

import aiohttp

from watch_service.sink.client import WatchClient
from watch_service.sink.config import SinkConfig
from watch_service.sink.connection import (
    Connected,
    Disconnected,
    Frame,
    Opened,
    WatchOptions,
)
from watch_service.sink.indexer import Indexer
from watch_service.sink.landing import Landing
from watch_service.sink.progress import Stats, progress_line
from watch_service.sink.rows import DATA_KINDS
from watch_service.sink.spool import Spool
from watch_service.store.search_index import SearchIndex

log = logging.getLogger("auditsync.sink")

INDEX_DRAIN_S = 5.0


def watch_options(cfg: SinkConfig) -> WatchOptions:
    """The client settings of a sink: every column of a record, and topics waited for."""
    return WatchOptions(
        cfg.url,
        cfg.topics,
        from_seq=cfg.from_seq,
        tail=cfg.tail,
        node=cfg.node,
        key=cfg.key,
        heartbeat_ms=cfg.heartbeat_ms,
        watchdog_slack_ms=cfg.watchdog_slack_ms,
        backoff_cap_ms=cfg.backoff_cap_ms,
        wait_for_topics=True,
    )


class Sink:
    def __init__(
        self,
        cfg: SinkConfig,
        landing: Landing,
        index: SearchIndex | None,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.cfg, self.index = cfg, index
        self.stats = Stats()
        state = landing.load_state()
        self.indexer = Indexer(index, landing, state, self.stats) if index is not None else None
        self.spool = Spool(cfg, landing, state, self.stats, self.indexer)
        changed = sorted(state.topics) != sorted(cfg.topics) or state.node != cfg.node
        self.client = WatchClient(
            watch_options(cfg),
            wid=None if changed else state.wid,
            last_event_id=state.last_id,
            resume=lambda: {t: c for t, c in self.spool.cursors.items() if t in cfg.topics},
            idle_s=self.spool.wait_s,
            draw=draw,
        )

    def stop(self) -> None:
        self.client.stop()

    async def run(self) -> int:
        """Until stopped (0) or refused for good by the server (1)."""
        state = self.spool.state
        log.info(
            "sink %s: topics %s from %s, resuming after frame %d",
            self.cfg.consumer,
            ",".join(self.cfg.topics),
            self.cfg.url,
            state.frame_no,
        )
        if self.cfg.faults.enabled:
            log.warning("%s", self.cfg.faults.describe())
        tasks = [asyncio.create_task(self._progress(), name="sink-progress")]
        if self.indexer is not None:
            tasks.append(asyncio.create_task(self.indexer.run(), name="sink-indexer"))
        try:
            async with aiohttp.ClientSession() as http:
                code = await self._loop(http)
            await self.spool.flush()
            if self.indexer is not None and not await self.indexer.drain(INDEX_DRAIN_S):
                log.warning("search index still behind at shutdown; it catches up on restart")
            await self.spool.save()
            log.info(
                "sink %s stopped after frame %d (%d records, %d duplicates, %d reconnects)",
                self.cfg.consumer,
                state.frame_no,
                self.stats.records,
                self.stats.duplicates,
                self.stats.reconnects,
            )
            return code
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self.index is not None:
                await self.index.close()

    async def _loop(self, http: aiohttp.ClientSession) -> int:
        async with contextlib.aclosing(self.client.items(http)) as items:
            async for item in items:
                if isinstance(item, Frame):
                    self._on_frame(item)
                elif isinstance(item, Disconnected):
                    await self.spool.flush()
                    if item.fatal:
                        log.error("giving up: %s", item.reason)
                        return 1
                    if item.session_gone:
                        self.spool.state.wid = None
                    self.stats.reconnects += 1
                    log.warning("stream ended (%s); reconnecting", item.reason)
                    continue
                elif isinstance(item, Opened):
                    self.spool.start_session(item.wid, item.start)
                    await self.spool.save()
                    log.info("watch session %s starts at %s", item.wid, item.start)
                elif isinstance(item, Connected):
                    log.info(
                        "stream %s open (Last-Event-ID %s)", item.wid, item.last_event_id or "-"
                    )
                if self.spool.due():
                    await self.spool.flush()
        return 0

    def _on_frame(self, frame: Frame) -> None:
        """Spool a data frame; a malformed one ends the connection (it is asked for again)."""
        if frame.event == "error":
            log.warning("error frame: %s", frame.data)
            return
        if frame.event not in DATA_KINDS:
            log.warning("ignoring unknown event type %r", frame.event)
            return
        try:
            self.spool.add(frame)
        except (ValueError, TypeError, KeyError) as exc:
            self.client.drop(f"protocol: malformed {frame.event} frame: {exc}")

    async def _progress(self) -> None:
        before, at = self.stats.snapshot(), time.monotonic()
        while True:
            await asyncio.sleep(self.cfg.progress_s)
            now, now_at = self.stats.snapshot(), time.monotonic()
            line = progress_line(before, now, now_at - at)
            if self.cfg.faults.enabled:
                log.warning("%s | %s", line, self.cfg.faults.describe())
            else:
                log.info("%s", line)
            before, at = now, now_at
