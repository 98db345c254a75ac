"""One watch session over HTTP (seed 002): ``POST /v0/watch`` and one ``GET /v0/watch/{wid}``,
and the items the client reports.

The building blocks of :mod:`watch_service.sink.client`, which adds reconnecting. ``pump``
runs as its own task and puts what the connection brings into a queue, so its reader can wait
on a timer while the stream is quiet. It reads with aiohttp's ``sock_read`` timeout set to the
watchdog (2 × heartbeat + slack): any bytes, ``: hb`` included, re-arm it, and silence longer
than that drops the connection. Every way a connection ends is reported as one
:class:`Disconnected` item, never an exception.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from watch_service.protocol.errors import AuditsyncError
from watch_service.sink.backoff import watchdog_s
from watch_service.sink.sse import Item, SseParser

FATAL_STATUSES = (400, 401, 403, 406)  # the request itself is refused: retrying cannot help


@dataclasses.dataclass(frozen=True, slots=True)
class WatchOptions:
    """What to watch and how; the session's POST body and the client's reconnect settings.

    ``from_seq`` / ``tail`` apply to a topic only when no resume position is known for it.
    ``wait_for_topics``: a topic that does not exist yet (POST 404 ``topic_not_found``) is
    retried with backoff (a daemon such as the sink) instead of failing at once (a user).
    """

    url: str
    topics: tuple[str, ...]
    from_seq: int = 0
    tail: bool = False
    node: str | None = None
    key: str | None = None
    heartbeat_ms: int = 15_000
    consistency: str | None = None
    include_data: bool = True
    include_tags: bool = True
    include_meta: bool = True
    watchdog_slack_ms: int = 5_000
    backoff_cap_ms: int = 30_000
    wait_for_topics: bool = False

    @property
    def watchdog_s(self) -> float:
        return watchdog_s(self.heartbeat_ms, self.watchdog_slack_ms)


class SessionError(AuditsyncError):
    """POST /v0/watch failed; ``fatal`` when retrying cannot help (bad key, unknown topic)."""

    def __init__(self, message: str, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclasses.dataclass(frozen=True, slots=True)
class Connected:
    """The stream answered 200; frames follow."""

    wid: str
    last_event_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    received_ms: int
    items: list[Item]


@dataclasses.dataclass(frozen=True, slots=True)
class Disconnected:
    """A connection (or an attempt to make one) ended."""

    reason: str
    session_gone: bool = False  # 404 / not_found: the wid was reclaimed; POST again
    fatal: bool = False  # retrying cannot help


QueueItem = Connected | Chunk | Disconnected


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    """One SSE event of the watch stream: its type, parsed JSON data and cursor id."""

    event: str
    data: Any
    id: str
    received_ms: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Opened:
    """A new session: its wid and the per-topic position it starts from."""

    wid: str
    start: dict[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Idle:
    """Nothing arrived for ``idle_s()`` seconds (only when ``idle_s`` is given)."""


ClientItem = Opened | Connected | Frame | Heartbeat | Idle | Disconnected


def error_code(data: Any) -> str | None:
    """The ``code`` of an ``error`` frame's data, if it has one."""
    code = data.get("code") if isinstance(data, dict) else None
    return code if isinstance(code, str) else None


def auth_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def session_body(opts: WatchOptions, from_seqs: Mapping[str, int] | None) -> dict:
    """The POST body: resume positions when known, else the configured start, per topic."""
    topics = {}
    for topic in opts.topics:
        if from_seqs is not None and topic in from_seqs:
            topics[topic] = {"from_seq": from_seqs[topic]}
        elif opts.tail:
            topics[topic] = {"tail": True}
        else:
            topics[topic] = {"from_seq": opts.from_seq}
    body: dict = {
        "topics": topics,
        "heartbeat_ms": opts.heartbeat_ms,
        "include_tags": opts.include_tags,
        "include_meta": opts.include_meta,
        "include_data": opts.include_data,
    }
    if opts.consistency is not None:
        body["consistency"] = opts.consistency
    if opts.node is not None:
        body["node"] = opts.node
    return body


async def error_text(resp: aiohttp.ClientResponse) -> str:
    try:
        err = (await resp.json(content_type=None))["error"]
        return f"{resp.status} {err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError, aiohttp.ClientError):
        return f"{resp.status} {resp.reason}"


def _refused_for_good(status: int, opts: WatchOptions) -> bool:
    return status in FATAL_STATUSES or (status == 404 and not opts.wait_for_topics)


async def create_session(
    http: aiohttp.ClientSession, opts: WatchOptions, from_seqs: Mapping[str, int] | None
) -> tuple[str, dict[str, int]]:
    """POST /v0/watch; returns the wid and the cursor map the session starts from."""
    body = session_body(opts, from_seqs)
    try:
        async with http.post(
            f"{opts.url}/v0/watch",
            json=body,
            headers=auth_headers(opts.key),
            timeout=aiohttp.ClientTimeout(total=30),
        ) as resp:
            if resp.status != 200:
                raise SessionError(
                    f"POST /v0/watch: {await error_text(resp)}",
                    _refused_for_good(resp.status, opts),
                )
            answer = await resp.json()
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        raise SessionError(f"POST /v0/watch: {type(exc).__name__}: {exc}", False) from None
    reported = answer.get("topics") or {}
    start = {}
    for topic, opts_ in body["topics"].items():
        seq = (reported.get(topic) or {}).get("from_seq", opts_.get("from_seq"))
        if isinstance(seq, int):
            start[topic] = seq
    return answer["wid"], start


async def pump(
    http: aiohttp.ClientSession,
    opts: WatchOptions,
    wid: str,
    last_id: str,
    queue: asyncio.Queue[QueueItem],
) -> None:
    """Open GET /v0/watch/{wid} and queue parsed chunks until the connection ends."""
    headers = {"Accept": "text/event-stream", **auth_headers(opts.key)}
    if last_id:
        headers["Last-Event-ID"] = last_id
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=opts.watchdog_s)
    try:
        async with http.get(f"{opts.url}/v0/watch/{wid}", headers=headers, timeout=timeout) as resp:
            if resp.status != 200:
                await queue.put(
                    Disconnected(
                        f"GET /v0/watch/{wid}: {await error_text(resp)}",
                        session_gone=resp.status == 404,
                        fatal=resp.status in FATAL_STATUSES,
                    )
                )
                return
            await queue.put(Connected(wid, last_id))
            parser = SseParser(last_id)
            async for data in resp.content.iter_any():
                items = parser.feed(data)
                if items:
                    await queue.put(Chunk(time.time_ns() // 1_000_000, items))
        await queue.put(Disconnected("server closed the stream"))
    except TimeoutError:
        await queue.put(Disconnected(f"watchdog: no bytes for {opts.watchdog_s}s"))
    except (aiohttp.ClientError, OSError) as exc:
        await queue.put(Disconnected(f"connection: {type(exc).__name__}: {exc}"))
