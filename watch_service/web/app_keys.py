"""Typed application keys shared by the route modules."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from watch_service.engine.appender import Appender
from watch_service.engine.hub import Hub
from watch_service.settings import Settings
from watch_service.web.auth import KeyRing
from watch_service.web.gc_pacing import GcPacer
from watch_service.web.handoff import ConnectionHandoff
from watch_service.web.metrics import Metrics
from watch_service.web.stream_slots import StreamSlots

SETTINGS = web.AppKey("settings", Settings)
POOL = web.AppKey("pool", AsyncConnectionPool)
KEYS = web.AppKey("keys", KeyRing)
METRICS = web.AppKey("metrics", Metrics)
DB_URL = web.AppKey("db_url", str)
HUB = web.AppKey("hub", Hub)
APPENDER = web.AppKey("appender", Appender)
# serve --workers N: connections passed to the worker that owns their topic (web/handoff.py)
HANDOFF = web.AppKey("handoff", ConnectionHandoff)
# serve: the process's full collections walk what is new (web/gc_pacing.py)
GC_PACER = web.AppKey("gc_pacer", GcPacer)
STREAMS = web.AppKey("streams", set)  # open SSE WatchStreams (cursor flusher)
# The service-wide count of open SSE streams behind AUDITSYNC_MAX_STREAMS (web/stream_slots.py)
STREAM_SLOTS = web.AppKey("stream_slots", StreamSlots)
# Tasks of every open streaming response (SSE, Permify watch): shutdown cancels them.
STREAM_TASKS = web.AppKey("stream_tasks", set[asyncio.Task[Any]])
