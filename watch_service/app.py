"""The composition root: ``create_app(settings)`` builds the aiohttp application (and the gRPC
server) from ``server/`` (the SSE watch and topic API), ``compat/`` (Permify, SpiceDB), the
delivery ``engine/`` both use, and the ``store/``.

Each resource (pool, retention loop, …) is one ``cleanup_ctx`` that cancels and awaits on
exit, so shutdown is clean whichever way the process stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import psycopg
from aiohttp import web
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from watch_service.compat import permify_rest, permify_watch
from watch_service.engine.appender import Appender
from watch_service.engine.hub import Hub
from watch_service.engine.stopping import stop_tasks
from watch_service.server import (
    health_routes,
    openapi_routes,
    search_routes,
    session_gc,
    topic_routes,
    watch_routes,
)
from watch_service.server.stream_upkeep import Releases, cursor_flusher, sweeper
from watch_service.settings import Settings
from watch_service.store import authz_writes
from watch_service.store.database import database_url
from watch_service.store.retention import RetentionLeader
from watch_service.web import cors
from watch_service.web.app_keys import (
    APPENDER,
    DB_URL,
    HUB,
    KEYS,
    METRICS,
    POOL,
    SETTINGS,
    STREAM_SLOTS,
    STREAM_TASKS,
    STREAMS,
)
from watch_service.web.auth import KeyRing
from watch_service.web.auth_gate import authenticate_first
from watch_service.web.errors import MAX_BODY, error_middleware
from watch_service.web.handoff import PASSED
from watch_service.web.metrics import Metrics
from watch_service.web.nul_gate import refuse_nul
from watch_service.web.stream_slots import StreamSlots

log = logging.getLogger("auditsync.server")


@web.middleware
async def count_requests(request: web.Request, handler) -> web.StreamResponse:
    """Counts every request and times it to its response head (a stream: to its first byte).
    Errors are counted with the status the error middleware inside this one rendered."""
    started = time.perf_counter()
    response = await handler(request)
    if request.get(PASSED):
        return response  # another worker answers it, and counts it
    route = request.match_info.route.resource
    name = route.canonical if route is not None else "unmatched"
    request.app[METRICS].request_done(
        name, request.method, response.status, time.perf_counter() - started
    )
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


async def retention_loop(app: web.Application, leader: RetentionLeader) -> None:
    """Every interval, a pass if this worker leads retention (one pass per service), else a
    try to become the leader."""
    settings, metrics = app[SETTINGS], app[METRICS]
    while True:
        await asyncio.sleep(settings.retention_interval_s)
        try:
            await leader.run_pass(lambda _topic, gap: metrics.trimmed.labels(gap.reason).inc())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed pass is retried next interval, never fatal
            log.warning("retention pass failed: %s", exc)


async def _retention_ctx(app: web.Application) -> AsyncIterator[None]:
    leader = RetentionLeader(app[DB_URL], connection_kwargs(app[SETTINGS]))
    task = asyncio.create_task(retention_loop(app, leader), name="retention")
    yield
    await stop_tasks([task])
    await leader.close()


async def _watch_ctx(app: web.Application) -> AsyncIterator[None]:
    """The LISTEN hub, its safety poll and the cursor flusher; open streams end on exit."""
    settings, metrics = app[SETTINGS], app[METRICS]
    metrics.tail_cache_limit_bytes.set(settings.tail_cache_bytes)
    hub = app[HUB] = Hub(
        app[POOL],
        app[DB_URL],
        settings.tail_cache_bytes,
        metrics.tail_cache_bytes.set,
        metrics.delivery_lag.observe,
        lambda n: metrics.frame_sent("record", n),
    )
    app[APPENDER].committed = hub.appended
    app[APPENDER].uncertain = hub.reread
    hub.own_appends = app[APPENDER].in_flight
    releases = Releases(app)
    hub.on_takeover = releases.asked
    tasks = [
        asyncio.create_task(sweeper(app), name="stream-sweep"),
        asyncio.create_task(hub.run(), name="listen"),
        asyncio.create_task(hub.safety_poll(), name="safety-poll"),
        asyncio.create_task(cursor_flusher(app), name="cursor-flusher"),
        asyncio.create_task(session_gc.session_gc_loop(app), name="session-gc"),
    ]
    yield
    await stop_tasks(tasks)  # bounded: a task may lose its cancellation (engine/stopping.py)
    hub.on_takeover = None
    await releases.aclose()
    app[APPENDER].committed = app[APPENDER].uncertain = None
    await hub.aclose()


async def _end_streams(app: web.Application) -> None:
    """On shutdown, open streams end: each writes its terminal frame and stores its cursors."""
    for task in app[STREAM_TASKS].copy():
        task.cancel()


async def _authz_history(app: web.Application) -> None:
    """AUDITSYNC_AUTHZ_HISTORY_MS applies to existing tenants too, not only to new ones. Best
    effort: a service whose database is down at start still starts (and says so)."""
    try:
        async with app[POOL].connection() as conn:
            history_ms = app[SETTINGS].authz_history_ms
            changed = await authz_writes.apply_history_window(conn, history_ms)
    except (psycopg.Error, PoolTimeout) as exc:
        log.warning("authz history window not applied to existing tenants (next start): %s", exc)
        return
    if changed:
        log.info("authz history window applied to %d existing tenant(s)", changed)


def create_app(settings: Settings, db_url: str | None = None) -> web.Application:
    app = web.Application(
        middlewares=[count_requests, error_middleware, authenticate_first, refuse_nul],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[DB_URL] = db_url or database_url(settings)
    app[KEYS] = KeyRing.load(settings.keys_file, settings.grpc_key)
    app[METRICS] = Metrics()
    app[MAX_BODY] = settings.max_body_bytes
    cors.install(app, settings.cors_origins)
    app.cleanup_ctx.append(_pool_ctx)
    app[STREAMS] = set()
    app[STREAM_SLOTS] = StreamSlots(settings.max_streams)  # serve --workers N: shared
    app[STREAM_TASKS] = set()
    app.cleanup_ctx.append(_retention_ctx)
    app.cleanup_ctx.append(_watch_ctx)
    app.on_shutdown.append(_end_streams)
    app.add_routes(topic_routes.routes)
    app.add_routes(health_routes.routes)
    app.add_routes(openapi_routes.routes)
    app.add_routes(watch_routes.routes)
    app.add_routes(search_routes.routes)
    app.add_routes(permify_rest.routes)
    app.add_routes(permify_watch.routes)
    if settings.grpc_port is not None:
        # Imported only when enabled: grpc and authzed come with the `authz` extra.
        from watch_service.compat import spicedb_grpc

        app.cleanup_ctx.append(spicedb_grpc.grpc_ctx)
    if settings.permify_grpc_port is not None:
        from watch_service.compat import permify_grpc

        app.cleanup_ctx.append(permify_grpc.grpc_ctx)
    app.on_startup.append(_authz_history)
    return app
