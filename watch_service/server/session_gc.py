"""The idle watch-session GC: one pass (``collect``, also run on every ``POST /v0/watch`` and
stream open) and the periodic loop the app owns, so sessions expire without watch traffic.

A pass deletes sessions idle for ``session_ttl_ms`` whose stream lease has lapsed
(``store.sessions.gc``); it costs one indexed ``DELETE`` whatever the number of sessions kept.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from watch_service.store import sessions
from watch_service.web.app_keys import POOL, SETTINGS

log = logging.getLogger("auditsync.watch")


async def collect(app: web.Application) -> int:
    """One GC pass; returns how many sessions it reclaimed."""
    async with app[POOL].connection() as conn:
        removed = await sessions.gc(conn, app[SETTINGS].session_ttl_ms)
    if removed:
        log.info("session GC reclaimed %d idle session(s)", removed)
    return removed


async def session_gc_loop(app: web.Application) -> None:
    """``collect`` every ``session_gc_interval_s``; cancelled by the app's watch context."""
    while True:
        await asyncio.sleep(app[SETTINGS].session_gc_interval_s)
        try:
            await collect(app)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed pass is retried next interval, never fatal
            log.warning("session GC pass failed: %s", exc)
