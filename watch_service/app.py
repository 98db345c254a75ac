"""The composition root: ``create_app(settings)`` builds the aiohttp application (and the gRPC
server) from ``server/`` (the SSE watch and topic API), ``compat/`` (Permify, SpiceDB), the
delivery ``engine/`` both use, and the ``store/``.

Each resource (pool, retention loop, …) is one ``cleanup_ctx`` that cancels and awaits on
exit, so shutdown is clean whichever way the process stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from watch_service.compat import permify_rest, permify_watch, spicedb_grpc
from watch_service.engine.appender import Appender
from watch_service.engine.tailer import Hub
from watch_service.server import health_routes, openapi_routes, topic_routes, watch_routes
from watch_service.settings import Settings
from watch_service.store.database import database_url
from watch_service.store.retention import run_retention
from watch_service.web.app_keys import (
    APPENDER,
    DB_URL,
    HUB,
    KEYS,
    METRICS,
    POOL,
    SETTINGS,
    STREAM_TASKS,
    STREAMS,
)
from watch_service.web.auth import KeyRing
from watch_service.web.errors import MAX_BODY, error_middleware
from watch_service.web.metrics import Metrics

log = logging.getLogger("auditsync.server")


@web.middleware
async def count_requests(request: web.Request, handler) -> web.StreamResponse:
    response = await handler(request)
    route = request.match_info.route.resource
    name = route.canonical if route is not None else "unmatched"
    request.app[METRICS].http_requests.inc(1, name, str(response.status))
    return response


def connection_kwargs(settings: Settings) -> dict:
    kwargs: dict = {"autocommit": True}
    if settings.synchronous_commit == "off":
        kwargs["options"] = "-c synchronous_commit=off"
    return kwargs


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pool = AsyncConnectionPool(
        app[DB_URL],
        min_size=settings.pool_min,
        max_size=settings.pool_max,
        timeout=settings.pool_timeout_s,
        open=False,
        kwargs=connection_kwargs(settings),
        name="auditsync",
    )
    await pool.open(wait=False)
    app[POOL] = pool
    app[APPENDER] = Appender(pool)
    yield
    await pool.close()


async def retention_loop(app: web.Application) -> None:
    settings, metrics = app[SETTINGS], app[METRICS]
    while True:
        await asyncio.sleep(settings.retention_interval_s)
        try:
            await run_retention(app[POOL], lambda _topic, gap: metrics.trimmed.inc(1, gap.reason))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed pass is retried next interval, never fatal
            log.warning("retention pass failed: %s", exc)


async def _retention_ctx(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(retention_loop(app), name="retention")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _watch_ctx(app: web.Application) -> AsyncIterator[None]:
    """The LISTEN hub, its safety poll and the cursor flusher; open streams end on exit."""
    hub = app[HUB] = Hub(app[POOL], app[DB_URL])
    tasks = [
        asyncio.create_task(hub.run(), name="listen"),
        asyncio.create_task(hub.safety_poll(), name="safety-poll"),
        asyncio.create_task(watch_routes.cursor_flusher(app), name="cursor-flusher"),
    ]
    yield
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _end_streams(app: web.Application) -> None:
    """On shutdown, open streams end: each writes its terminal frame and stores its cursors."""
    for task in list(app[STREAM_TASKS]):
        task.cancel()


def create_app(settings: Settings, db_url: str | None = None) -> web.Application:
    app = web.Application(
        middlewares=[count_requests, error_middleware], client_max_size=settings.max_body_bytes
    )
    app[SETTINGS] = settings
    app[DB_URL] = db_url or database_url(settings)
    app[KEYS] = KeyRing.load(settings.keys_file, settings.grpc_key)
    app[METRICS] = Metrics()
    app[MAX_BODY] = settings.max_body_bytes
    app.cleanup_ctx.append(_pool_ctx)
    app[STREAMS] = set()
    app[STREAM_TASKS] = set()
    app.cleanup_ctx.append(_retention_ctx)
    app.cleanup_ctx.append(_watch_ctx)
    app.on_shutdown.append(_end_streams)
    app.add_routes(topic_routes.routes)
    app.add_routes(health_routes.routes)
    app.add_routes(openapi_routes.routes)
    app.add_routes(watch_routes.routes)
    app.add_routes(permify_rest.routes)
    app.add_routes(permify_watch.routes)
    if settings.grpc_port is not None:
        app.cleanup_ctx.append(spicedb_grpc.grpc_ctx)
    return app
