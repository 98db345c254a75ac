"""``POST /v0/watch`` and ``GET /v0/watch/{wid}`` (seed 002), plus the write-behind cursor
flusher and the registry of open streams."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import socket
import time

from aiohttp import web

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol import frames
from watch_service.protocol.errors import (
    NotAcceptable,
    NotFound,
    Throttled,
    TopicNotFound,
    Unauthorized,
)
from watch_service.protocol.names import check_wid
from watch_service.protocol.watch_request import WatchDefinition, watch_definition
from watch_service.server import session_gc
from watch_service.server.stream_upkeep import LEASE_S, TAKEOVER_WAIT_S
from watch_service.server.topic_routes import json_response
from watch_service.server.watch_stream import WatchStream
from watch_service.store import sessions
from watch_service.web.app_keys import (
    APPENDER,
    HUB,
    KEYS,
    METRICS,
    POOL,
    SETTINGS,
    STREAM_SLOTS,
    STREAM_TASKS,
    STREAMS,
)
from watch_service.web.auth import Key, authorize
from watch_service.web.errors import as_api_error
from watch_service.web.json_body import read_json_body
from watch_service.web.serving import pass_stream_request

log = logging.getLogger("auditsync.watch")
routes = web.RouteTableDef()


def new_wid() -> str:
    return "wid_" + base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


@routes.post("/v0/watch")
async def create_watch(request: web.Request) -> web.Response:
    started = time.perf_counter()
    key = request.app[KEYS].authenticate(
        request.headers.get("Authorization"), request.query.get("token")
    )
    authorize(key, "read")
    definition = watch_definition(await read_json_body(request))
    for topic in definition.topics:
        authorize(key, "read", topic)
    # The GC first, so the key's expired sessions do not count against its cap.
    await session_gc.collect(request.app)
    cap = request.app[SETTINGS].max_sessions_per_key
    async with request.app[POOL].connection() as conn:
        states = await sessions.topic_states(conn, list(definition.topics))
        for topic in definition.topics:
            if topic not in states or states[topic].deleted:
                raise TopicNotFound(topic)
        # A from_seq above the head is a cursor the consumer holds that the source no longer
        # has (a restore, a failover): the stream opens with a ``rewound`` frame for it.
        cursors = {
            t: states[t].head_seq if s.tail else s.from_seq for t, s in definition.topics.items()
        }
        wid = new_wid()
        held = await sessions.create(
            conn,
            wid,
            definition.to_json(),
            cursors,
            key.secret_sha256 if key else None,
            key.id if key else None,
            cap,
        )
    if held is not None and key is not None:
        raise Throttled(
            f"key {key.id!r} already holds {held} watch sessions, its cap of "
            f"{cap} (AUDITSYNC_MAX_SESSIONS_PER_KEY); reuse a wid, or let idle ones expire"
        )
    return json_response(
        {
            "wid": wid,
            "stream_url": f"/v0/watch/{wid}",
            "session_ttl_ms": request.app[SETTINGS].session_ttl_ms,
            "topics": {
                t: {
                    "from_seq": cursors[t],
                    "head_seq": states[t].head_seq,
                    "earliest_seq": states[t].earliest_seq,
                }
                for t in definition.topics
            },
            "performance": {"server_total_ms": round((time.perf_counter() - started) * 1000, 3)},
        }
    )


def _check_stream_auth(key: Key | None, row: sessions.SessionRow) -> None:
    """``key`` is the presented key (None: dev mode). A session opens only for the key that
    created it; a dev-mode session (no key hash) only while the service is in dev mode."""
    if key is None:
        return  # dev mode: the wid alone opens a stream
    if row.key_hash is None:
        raise Unauthorized(
            "this session was created while the service ran without keys; it does not open "
            "now that keys are configured: POST /v0/watch again with your key"
        )
    if key.secret_sha256 != row.key_hash:
        raise Unauthorized("this session is bound to a different key")


# HEAD is not served: it would open a stream (and renew its lease) with nobody reading.
@routes.get("/v0/watch/{wid}", allow_head=False)
async def open_watch(request: web.Request) -> web.StreamResponse:
    app = request.app
    # Authentication before anything else: an unknown wid without a key is 401, not 404, and
    # the GC does not run for an unauthenticated caller.
    key = app[KEYS].authenticate(
        request.headers.get("Authorization"), request.query.get("token"), allow_query_token=True
    )
    wid = check_wid(request.match_info["wid"])
    await session_gc.collect(app)
    async with app[POOL].connection() as conn:
        row = await sessions.load(conn, wid)
    if row is None:
        raise NotFound(f"watch session {wid!r} is unknown or expired; POST /v0/watch again")
    _check_stream_auth(key, row)
    if "text/event-stream" not in request.headers.get("Accept", ""):
        raise NotAcceptable("Accept must be text/event-stream")
    definition = WatchDefinition.from_json(row.definition)
    owner = _owner_elsewhere(app, definition)
    if owner is not None and await pass_stream_request(request, owner):
        return web.StreamResponse()  # never sent: the owner answers on the same connection
    slots = app[STREAM_SLOTS]
    if not slots.try_take():
        raise Throttled(
            f"stream cap of {slots.cap} open streams (service-wide) reached; retry later"
        )
    try:
        return await _stream(request, wid, definition)
    finally:
        slots.give_back()


def _owner_elsewhere(app: web.Application, definition: WatchDefinition) -> int | None:
    """The other worker that owns every topic of the stream (``engine.relay``), if one does
    and holds fewer open streams than ``streams_to_owner``: the stream goes there
    (``web.handoff``), so the process that commits the topic's appends pushes them, and no
    other is woken by them. A large fan-out stays spread over the workers that accepted it."""
    relay, limit = app[APPENDER].relay, app[SETTINGS].streams_to_owner
    if relay is None or limit <= 0:
        return None
    owners = {relay.elsewhere(topic) for topic in definition.topics}
    owner = owners.pop() if len(owners) == 1 else None
    if owner is None or app[STREAM_SLOTS].held_by(owner) >= limit:
        return None
    return owner


async def _stream(
    request: web.Request, wid: str, definition: WatchDefinition
) -> web.StreamResponse:
    """The stream of ``open_watch``, once it holds a stream slot."""
    app = request.app
    client = cursor_codec.parse_last_event_id(
        request.headers.get("Last-Event-ID"), list(definition.topics)
    )
    older = [s for s in app[STREAMS] if s.wid == wid]
    for stream in older:
        stream.end("taken over")  # one wid, one stream: its writes are fenced off below
    if older:  # the newest one's cursors are newer than the row's (write-behind)
        server_cursors = dict(max(older, key=lambda s: s.gen).state.cursors)
    else:  # a stream elsewhere stores its cursors first (bounded), then they are read
        async with app[POOL].connection() as conn:
            await sessions.ask_release(conn, wid, TAKEOVER_WAIT_S)
            stored = await sessions.load(conn, wid)
        if stored is None:
            raise NotFound(f"watch session {wid!r} is unknown or expired; POST /v0/watch again")
        server_cursors = {t: stored.cursors[t] for t in definition.topics}  # session topic order
    cursors = cursor_codec.rewind(server_cursors, client)
    async with app[POOL].connection() as conn:
        gen = await sessions.open_stream(conn, wid, cursors, LEASE_S)
    if gen is None:
        raise NotFound(f"watch session {wid!r} is unknown or expired; POST /v0/watch again")

    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-store",
            "Connection": "keep-alive",
            "X-Accel-Buffering": "no",
        }
    )
    # No enable_compression(): a compressor would hold frames back (StreamResponse is
    # uncompressed unless compression is enabled).
    await resp.prepare(request)
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    initial = {t: s.from_seq for t, s in definition.topics.items()}
    stream = WatchStream(
        wid, gen, definition, cursors, initial, app[HUB], request, resp, app[METRICS], client
    )
    app[STREAMS].add(stream)
    task = asyncio.current_task()
    assert task is not None  # a request handler runs in a task
    app[STREAM_TASKS].add(task)
    app[METRICS].open_streams.set(len(app[STREAMS]))
    try:
        await stream.run()
    except ConnectionError as exc:
        log.info("stream %s ended: %s", wid, exc or type(exc).__name__)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                resp.write(
                    frames.error_frame("unavailable", "the service is shutting down; reconnect")
                ),
                1.0,
            )
        raise
    except Exception as exc:  # once streaming, errors become a terminal error frame
        log.exception("stream %s failed", wid)
        with contextlib.suppress(Exception):
            err = as_api_error(exc)
            await asyncio.wait_for(resp.write(frames.error_frame(err.code, err.message)), 1.0)
    finally:
        app[STREAM_TASKS].discard(task)
        stream.closed = True  # the cursor flusher stores its cursors and releases its lease
    return resp
