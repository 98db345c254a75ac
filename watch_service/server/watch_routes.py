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
from watch_service.server.topic_routes import json_response
from watch_service.server.watch_stream import WatchStream
from watch_service.store import sessions
from watch_service.web.app_keys import HUB, KEYS, METRICS, POOL, SETTINGS, STREAM_TASKS, STREAMS
from watch_service.web.auth import authorize, hash_secret
from watch_service.web.errors import as_api_error
from watch_service.web.json_body import read_json_body

log = logging.getLogger("auditsync.watch")
routes = web.RouteTableDef()
LEASE_S = 30.0


def new_wid() -> str:
    return "wid_" + base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


async def _gc(request: web.Request) -> None:
    async with request.app[POOL].connection() as conn:
        removed = await sessions.gc(conn, request.app[SETTINGS].session_ttl_ms)
    if removed:
        log.info("session GC reclaimed %d idle session(s)", removed)


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
    async with request.app[POOL].connection() as conn:
        states = await sessions.topic_states(conn, list(definition.topics))
        for topic in definition.topics:
            if topic not in states or states[topic].deleted:
                raise TopicNotFound(topic)
        cursors = {
            t: states[t].head_seq if s.tail else s.from_seq for t, s in definition.topics.items()
        }
        wid = new_wid()
        await sessions.create(
            conn,
            wid,
            definition.to_json(),
            cursors,
            key.secret_sha256 if key else None,
            key.id if key else None,
        )
    await _gc(request)
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


def _check_stream_auth(request: web.Request, row: sessions.SessionRow) -> None:
    if row.key_hash is None:
        return  # a dev-mode session: the wid alone opens it
    presented = request.headers.get("Authorization")
    secret = None
    if presented:
        scheme, _, value = presented.partition(" ")
        secret = value.strip() if scheme.lower() == "bearer" else None
    elif "token" in request.query:
        secret = request.query["token"]
    if not secret:
        raise Unauthorized(
            "this session is bound to the key that created it: present it as "
            "Authorization: Bearer <key>"
        )
    if hash_secret(secret) != row.key_hash or hash_secret(secret) not in request.app[KEYS].by_hash:
        raise Unauthorized("this session is bound to a different key")


@routes.get("/v0/watch/{wid}")
async def open_watch(request: web.Request) -> web.StreamResponse:
    app = request.app
    wid = check_wid(request.match_info["wid"])
    await _gc(request)
    async with app[POOL].connection() as conn:
        row = await sessions.load(conn, wid)
    if row is None:
        raise NotFound(f"watch session {wid!r} is unknown or expired; POST /v0/watch again")
    _check_stream_auth(request, row)
    if "text/event-stream" not in request.headers.get("Accept", ""):
        raise NotAcceptable("Accept must be text/event-stream")
    if len(app[STREAMS]) >= app[SETTINGS].max_streams:
        raise Throttled(
            f"stream cap of {app[SETTINGS].max_streams} open streams reached; retry later"
        )

    definition = WatchDefinition.from_json(row.definition)
    server_cursors = {t: row.cursors[t] for t in definition.topics}  # session topic order
    cursors = cursor_codec.rewind(
        server_cursors, cursor_codec.decode(request.headers.get("Last-Event-ID"))
    )
    async with app[POOL].connection() as conn:
        await sessions.open_stream(conn, wid, LEASE_S)

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
        wid,
        definition,
        cursors,
        initial,
        app[HUB],
        resp,
        app[METRICS],
        app[SETTINGS].write_timeout_s,
    )
    app[STREAMS].add(stream)
    task = asyncio.current_task()
    app[STREAM_TASKS].add(task)
    app[METRICS].open_streams.set(len(app[STREAMS]))
    try:
        await stream.run()
    except ConnectionError as exc:
        log.info("stream %s ended: %s", wid, type(exc).__name__)
    except TimeoutError:
        # The client stopped reading: drop it. Its cursor never moved past the unwritten frame.
        log.info(
            "stream %s: write timed out after %.1fs; disconnecting",
            wid,
            app[SETTINGS].write_timeout_s,
        )
        if request.transport is not None:
            request.transport.abort()
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
        app[STREAMS].discard(stream)
        app[STREAM_TASKS].discard(task)
        app[METRICS].open_streams.set(len(app[STREAMS]))
        stream.closed = True
        with contextlib.suppress(Exception):
            async with app[POOL].connection() as conn:
                await sessions.close_stream(conn, wid, stream.state.cursors)
    return resp


async def cursor_flusher(app: web.Application) -> None:
    """Write-behind: persist changed cursor maps of open streams and renew their leases."""
    interval = app[SETTINGS].cursor_flush_ms / 1000
    last_lease = 0.0
    while True:
        await asyncio.sleep(interval)
        renew = time.monotonic() - last_lease > LEASE_S / 3
        batch = []
        for stream in list(app[STREAMS]):
            if stream.state.dirty or renew:
                stream.state.dirty = False
                batch.append((stream.wid, dict(stream.state.cursors)))
        if not batch:
            continue
        try:
            async with app[POOL].connection() as conn:
                await sessions.save_cursors(conn, batch, LEASE_S)
            if renew:
                last_lease = time.monotonic()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("cursor flush failed (will retry): %s", exc)
            for stream in app[STREAMS]:
                stream.state.dirty = True
