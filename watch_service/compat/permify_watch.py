"""The Permify Watch (seed 000): ``POST /v1/tenants/{tenant_id}/watch`` streams one
grpc-gateway JSON line ``{"result": {"changes": {"snap_token", "data_changes"}}}`` per change
record of the tenant's change topic, from ``snap_token`` (exclusive) or from now.

Refused with UNAVAILABLE when the watch is disabled (``permify_watch_enabled``) or the live
PostgreSQL has ``track_commit_timestamp`` off. Once the stream has started, an error is a final
``{"error": {"code", "message", "details"}}`` line (a history gap is never skipped silently).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from watch_service.compat import permify_json as pj
from watch_service.compat.permify_rest import json_body, permify_handler
from watch_service.engine.topic_follower import HistoryLost, TopicGone, ensure_retained, follow
from watch_service.protocol import authz as pa
from watch_service.store import authz_writes as db
from watch_service.store.server_state import commit_timestamps_on
from watch_service.web.app_keys import HUB, POOL, SETTINGS, STREAM_TASKS

log = logging.getLogger("auditsync.permify")
routes = web.RouteTableDef()
IDLE_S = 1.0  # how often an idle watch checks that its client is still there


@routes.post("/v1/tenants/{tenant_id}/watch")
@permify_handler("read")
async def watch(request: web.Request, tenant: str) -> web.StreamResponse:
    app, settings = request.app, request.app[SETTINGS]
    token = (await json_body(request, {"snap_token"})).get("snap_token") or ""
    if not isinstance(token, str):
        raise pj.invalid("snap_token: expected a string")
    if not settings.permify_watch_enabled:
        raise pj.PermifyError(
            pj.UNAVAILABLE,
            "the watch service is disabled on this server (AUDITSYNC_PERMIFY_WATCH=false)",
        )
    topic = pa.change_topic(tenant)
    async with app[POOL].connection() as conn:
        if not await commit_timestamps_on(conn):
            raise pj.PermifyError(
                pj.UNAVAILABLE,
                "PostgreSQL is not configured for watch: "
                "track_commit_timestamp is off (ALTER SYSTEM SET "
                "track_commit_timestamp = on; then restart it)",
            )
        info = await db.ensure_topic(conn, tenant, settings.authz_history_ms)
    try:
        after = pa.decode_token(topic, token, "snap_token") if token else info.head_seq
    except pa.AuthzInputError as exc:
        raise pj.invalid(str(exc)) from None
    if after > info.head_seq:
        raise pj.invalid(f"snap_token: {token!r} is ahead of this tenant's changes")
    try:
        ensure_retained(after, info.earliest_seq)
    except HistoryLost as exc:
        raise pj.invalid(_history_message(exc)) from None
    resp = web.StreamResponse(
        headers={
            "Content-Type": "application/json",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    await _stream(request, resp, topic, after)
    return resp


def _history_message(exc: HistoryLost) -> str:
    return (
        f"snap_token is before the retained history: changes {exc.gap_from}..{exc.gap_to} "
        "are gone (the history window is the change topic's ttl). Re-read the current state "
        "with data/relationships/read and data/attributes/read, then watch without a "
        "snap_token (from now)."
    )


async def _stream(request: web.Request, resp: web.StreamResponse, topic: str, after: int) -> None:
    app = request.app
    timeout = app[SETTINGS].write_timeout_s
    task = asyncio.current_task()
    app[STREAM_TASKS].add(task)
    try:
        async for page in follow(app[HUB], app[POOL], topic, after, IDLE_S):
            if not page and (request.transport is None or request.transport.is_closing()):
                return
            for rec in page:
                changes = pa.parse_change_record(rec.data).changes
                if not changes:  # a schema write: Permify's watch streams data changes only
                    continue
                line = pj.watch_line(pa.encode_token(topic, rec.seq), changes)
                await asyncio.wait_for(resp.write(line), timeout)
    except HistoryLost as exc:
        await _final(resp, pj.invalid(_history_message(exc)))
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
        log.exception("permify watch on %s failed", topic)
        await _final(resp, pj.PermifyError(pj.INTERNAL, "internal server error"))
    finally:
        app[STREAM_TASKS].discard(task)


async def _final(resp: web.StreamResponse, err: pj.PermifyError) -> None:
    with contextlib.suppress(Exception):  # the client may be gone already
        await asyncio.wait_for(resp.write(pj.error_line(err)), 1.0)
