"""The sink's HTTP side of the SSE watch protocol (seed 002): create a session, open its
stream, and pump what arrives into a queue.

``pump`` runs as its own task so the consumer can flush on a timer while the stream is quiet.
It reads with aiohttp's ``sock_read`` timeout set to the watchdog (2 × heartbeat + slack): any
bytes, ``: hb`` included, re-arm it, and silence longer than that drops the connection. Every
way the connection ends is reported as one :class:`Disconnected` item, never an exception.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping

import aiohttp

from watch_service.protocol.errors import AuditsyncError
from watch_service.sink.backoff import watchdog_s
from watch_service.sink.config import SinkConfig
from watch_service.sink.sse import Item, SseParser

FATAL_STATUSES = (400, 401, 403, 406)


class SessionError(AuditsyncError):
    """POST /v0/watch failed; ``fatal`` when retrying cannot help (bad key, unknown topic)."""

    def __init__(self, message: str, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclasses.dataclass(frozen=True, slots=True)
class Connected:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    received_ms: int
    items: list[Item]


@dataclasses.dataclass(frozen=True, slots=True)
class Disconnected:
    reason: str
    session_gone: bool = False  # 404: the wid was GC'd; POST again
    fatal: bool = False         # retrying cannot help


QueueItem = Connected | Chunk | Disconnected


def auth_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def session_body(cfg: SinkConfig, from_seqs: Mapping[str, int] | None) -> dict:
    """The POST body: resume positions when known, else the configured start, per topic."""
    topics = {}
    for topic in cfg.topics:
        if from_seqs is not None and topic in from_seqs:
            topics[topic] = {"from_seq": from_seqs[topic]}
        elif cfg.tail:
            topics[topic] = {"tail": True}
        else:
            topics[topic] = {"from_seq": cfg.from_seq}
    body: dict = {"topics": topics, "heartbeat_ms": cfg.heartbeat_ms, "include_tags": True,
                  "include_meta": True, "include_data": True}
    if cfg.node is not None:
        body["node"] = cfg.node
    return body


async def _error_text(resp: aiohttp.ClientResponse) -> str:
    try:
        err = (await resp.json(content_type=None))["error"]
        return f"{resp.status} {err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError, aiohttp.ClientError):
        return f"{resp.status} {resp.reason}"


async def create_session(http: aiohttp.ClientSession, cfg: SinkConfig,
                         from_seqs: Mapping[str, int] | None) -> tuple[str, dict[str, int]]:
    """POST /v0/watch; returns the wid and the cursor map the session starts from."""
    body = session_body(cfg, from_seqs)
    try:
        async with http.post(f"{cfg.url}/v0/watch", json=body, headers=auth_headers(cfg.key),
                             timeout=aiohttp.ClientTimeout(total=30)) as resp:
            if resp.status != 200:
                # 404 topic_not_found is retried: the topic may yet be created.
                raise SessionError(f"POST /v0/watch: {await _error_text(resp)}",
                                   resp.status in FATAL_STATUSES)
            answer = await resp.json()
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        raise SessionError(f"POST /v0/watch: {type(exc).__name__}: {exc}", False) from None
    reported = answer.get("topics") or {}
    start = {}
    for topic, opts in body["topics"].items():
        seq = (reported.get(topic) or {}).get("from_seq", opts.get("from_seq"))
        if isinstance(seq, int):
            start[topic] = seq
    return answer["wid"], start


async def pump(http: aiohttp.ClientSession, cfg: SinkConfig, wid: str, last_id: str,
               queue: asyncio.Queue[QueueItem]) -> None:
    """Open GET /v0/watch/{wid} and queue parsed chunks until the connection ends."""
    headers = {"Accept": "text/event-stream", **auth_headers(cfg.key)}
    if last_id:
        headers["Last-Event-ID"] = last_id
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10,
                                    sock_read=watchdog_s(cfg.heartbeat_ms, cfg.watchdog_slack_ms))
    try:
        async with http.get(f"{cfg.url}/v0/watch/{wid}", headers=headers,
                            timeout=timeout) as resp:
            if resp.status != 200:
                await queue.put(Disconnected(
                    f"GET stream: {await _error_text(resp)}", session_gone=resp.status == 404,
                    fatal=resp.status in FATAL_STATUSES))
                return
            await queue.put(Connected())
            parser = SseParser(last_id)
            async for data in resp.content.iter_any():
                items = parser.feed(data)
                if items:
                    await queue.put(Chunk(time.time_ns() // 1_000_000, items))
        await queue.put(Disconnected("server closed the stream"))
    except asyncio.TimeoutError:
        await queue.put(Disconnected("watchdog: no bytes for "
                                     f"{watchdog_s(cfg.heartbeat_ms, cfg.watchdog_slack_ms)}s"))
    except (aiohttp.ClientError, OSError) as exc:
        await queue.put(Disconnected(f"connection: {type(exc).__name__}: {exc}"))
