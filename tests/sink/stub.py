"""A scripted stand-in for the remote watch service (a test double for the *peer*, not for any
part of the sink), for protocol edge cases the real server does not produce on demand: odd
chunking, ``retry:``, silence, 404 after a GC, error frames, re-delivery.

Each ``GET /v0/watch/{wid}`` takes the next script: an HTTP status to refuse with, or a list of
steps — ``bytes`` to write (each as its own write), a ``float`` pause in seconds (how a peer
paces heartbeats), or ``HANG`` (stay open and silent). A script that runs out closes the stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

import orjson
from aiohttp import web

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol import frames

HANG = object()


def record_frame(
    topic: str,
    seqs: list[int],
    cursors: dict[str, int],
    head: int | None = None,
    tags: dict[int, str] | None = None,
) -> bytes:
    """A record frame for ``seqs``; ``cursors`` is the composite id after it."""
    recs = []
    for s in seqs:
        rec = {"$seq": s, "$ts": 1000 + s, "data": {"n": s, "topic": topic}}
        if tags and s in tags:
            rec["$tag"] = tags[s]
        recs.append(orjson.dumps(rec).decode())
    data = frames.record_data(topic, recs, seqs[0] - 1, seqs[-1], head or seqs[-1])
    return frames.frame("record", data, cursor_codec.encode(cursors))


def event_frame(kind: str, body: dict, cursors: dict[str, int]) -> bytes:
    return frames.frame(kind, orjson.dumps(body).decode(), cursor_codec.encode(cursors))


@dataclasses.dataclass
class Get:
    wid: str
    last_event_id: str | None
    authorization: str | None
    at: float


class StubWatch:
    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.gets: list[Get] = []
        self.scripts: list = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> StubWatch:
        app = web.Application()
        app.router.add_post("/v0/watch", self._post)
        app.router.add_get("/v0/watch/{wid}", self._get)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def _post(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.posts.append(body)
        topics = {
            t: {"from_seq": o.get("from_seq", 0), "head_seq": 0, "earliest_seq": 1}
            for t, o in body["topics"].items()
        }
        wid = f"wid_{len(self.posts)}"
        return web.json_response(
            {
                "wid": wid,
                "stream_url": f"/v0/watch/{wid}",
                "session_ttl_ms": 300000,
                "topics": topics,
            }
        )

    async def _get(self, request: web.Request) -> web.StreamResponse:
        self.gets.append(
            Get(
                request.match_info["wid"],
                request.headers.get("Last-Event-ID"),
                request.headers.get("Authorization"),
                time.monotonic(),
            )
        )
        script = self.scripts.pop(0) if self.scripts else [HANG]
        if isinstance(script, int):
            return web.json_response(
                {
                    "error": {
                        "code": "not_found" if script == 404 else "unauthorized",
                        "message": "scripted",
                    }
                },
                status=script,
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is not None:  # so that tiny scripted writes are not held back by Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for step in script:
            if step is HANG:
                await asyncio.Event().wait()
            elif isinstance(step, float):
                await asyncio.sleep(step)
            else:
                await resp.write(step)
        return resp
