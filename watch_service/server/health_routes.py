"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from aiohttp import web

from watch_service.server.topic_routes import json_response
from watch_service.store.migrate import latest_version
from watch_service.store.server_state import readiness
from watch_service.web.app_keys import METRICS, POOL, SETTINGS
from watch_service.web.metrics import CONTENT_TYPE

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    problems = []
    try:
        timeout = min(2.0, request.app[SETTINGS].pool_timeout_s)
        async with request.app[POOL].connection(timeout=timeout) as conn:
            state = await readiness(conn)
        version = state.schema_version
        if not state.commit_timestamps:
            problems.append("track_commit_timestamp is off")
        if version < latest_version():
            problems.append(
                f"schema at migration {version}, need {latest_version()}: run `auditsync migrate`"
            )
    except Exception as exc:  # any failure to ask is "not ready", with the reason
        problems.append(f"PostgreSQL: {type(exc).__name__}: {str(exc).strip() or 'unreachable'}")
    if problems:
        return json_response(
            {"error": {"code": "unavailable", "message": "; ".join(problems)}}, 503
        )
    return json_response({"status": "ready"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    registry = request.app[METRICS]
    registry.observe_pool(request.app[POOL].get_stats())
    return web.Response(
        body=registry.render(),
        headers={"Content-Type": CONTENT_TYPE, "X-Content-Type-Options": "nosniff"},
    )
