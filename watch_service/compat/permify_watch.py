"""The Permify Watch (seed 000) over REST: ``POST /v1/tenants/{tenant_id}/watch`` streams one
grpc-gateway JSON line ``{"result": {"changes": {"snap_token", "data_changes"}}}`` per change
record of the tenant's change topic, from ``snap_token`` (exclusive) or from now
(``permify_stream.watch_start`` / ``watch_changes``, shared with the gRPC Watch).

Once the stream has started, an error is a final ``{"error": {"code", "message", "details"}}``
line (a history gap is never skipped silently).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from watch_service.compat import permify_json as pj
from watch_service.compat import permify_ops as ops
from watch_service.compat import permify_stream as stream
from watch_service.compat.permify_rest import json_body, permify_handler
from watch_service.engine.topic_follower import HistoryLost, SourceRewound, TopicGone
from watch_service.web.app_keys import HUB, POOL, SETTINGS, STREAM_TASKS

log = logging.getLogger("auditsync.permify")
routes = web.RouteTableDef()
IDLE_S = 1.0  # how often an idle watch checks that its client is still there


@routes.post("/v1/tenants/{tenant_id}/watch")
@permify_handler()
async def watch(request: web.Request, ctx: ops.Ctx, tenant: str | None) -> web.StreamResponse:
    assert tenant is not None
    start = await stream.watch_start(ctx, tenant, await json_body(request))
    resp = web.StreamResponse(
        headers={
            "Content-Type": "application/json",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    await _stream(request, resp, start)
    return resp


async def _stream(request: web.Request, resp: web.StreamResponse, start: stream.WatchStart) -> None:
    app = request.app
    timeout = app[SETTINGS].write_timeout_s
    task = asyncio.current_task()
    assert task is not None  # a request handler runs in a task
    app[STREAM_TASKS].add(task)
    try:
        async for item in stream.watch_changes(app[HUB], app[POOL], start, IDLE_S):
            if item is None:
                if request.transport is None or request.transport.is_closing():
                    return
                continue
            await asyncio.wait_for(resp.write(pj.watch_line(*item)), timeout)
    except pj.PermifyError as err:
        await _final(resp, err)
    except (HistoryLost, SourceRewound) as exc:
        await _final(resp, stream.lost(exc))
    except TopicGone:
        await _final(resp, pj.PermifyError(pj.NOT_FOUND, "the tenant was deleted"))
    except (TimeoutError, ConnectionError):
        if request.transport is not None:  # gone or stopped reading: drop the connection
            request.transport.abort()
    except asyncio.CancelledError:
        await _final(
            resp,
            pj.PermifyError(
                pj.UNAVAILABLE, "the service is shutting down; reconnect with the last snap_token"
            ),
        )
        raise
    except Exception:  # once streaming, an error is the final line
        log.exception("permify watch on %s failed", start.topic)
        await _final(resp, pj.PermifyError(pj.INTERNAL, "internal server error"))
    finally:
        app[STREAM_TASKS].discard(task)


async def _final(resp: web.StreamResponse, err: pj.PermifyError) -> None:
    with contextlib.suppress(Exception):  # the client may be gone already
        await asyncio.wait_for(resp.write(pj.error_line(err)), 1.0)
