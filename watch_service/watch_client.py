"""``auditsync watch``: a command-line client of the SSE watch (seed 002).

It POSTs ``/v0/watch``, GETs the stream and prints one line per frame: ``event topic …``
(``record orders 4097 4098``, ``caught-up orders head=5210``, ``tombstone orders cap
80000-83000``…) or, with ``--json``, one JSON object per frame. When the stream drops it
reconnects after the server's ``retry:`` delay with ``Last-Event-ID`` set to the last id it
printed, and POSTs a new session from those positions if the old one was reclaimed (404).
A silent stream (no byte for 2 × heartbeat + 5 s) counts as dropped. Status goes to stderr.

Exit status: 0 when done (``--max-frames`` printed, or ``--timeout`` reached without
``--max-frames``), 1 when ``--timeout`` ran out before ``--max-frames``, 2 on a request the
server refuses for good (400, 401, 403, 406) or bad flags.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import sys
import time

import aiohttp

from watch_service.protocol.errors import AuditsyncError
from watch_service.sink.sse import Comment, Event, Retry, SseParser

FATAL = (400, 401, 403, 406)
DEFAULT_RETRY_MS = 2000


class Fatal(AuditsyncError):
    pass


class Done(AuditsyncError):
    pass


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="auditsync watch", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8400", help="the service's base URL")
    p.add_argument("--topics", required=True, help="comma-separated topic names")
    p.add_argument("--from-seq", type=int, default=0, help="deliver seqs after this (all topics)")
    p.add_argument("--tail", action="store_true", help="only records appended after subscribing")
    p.add_argument("--node", help="this node's name: its own records are not delivered")
    p.add_argument("--key", help="bearer key (sent as Authorization: Bearer)")
    p.add_argument("--heartbeat-ms", type=int, default=15000)
    p.add_argument("--consistency", choices=["eventual", "strong"], default="eventual")
    p.add_argument("--no-data", action="store_true", help="frames without record data")
    p.add_argument("--wid", help="open this existing session instead of POSTing a new one")
    p.add_argument("--last-event-id", help="Last-Event-ID for the first GET (rewinds only)")
    p.add_argument("--max-frames", type=int, help="stop after printing this many frames")
    p.add_argument("--timeout", type=float, help="stop after this many seconds")
    p.add_argument("--heartbeats", action="store_true", help="print heartbeats as 'hb' lines")
    p.add_argument("--json", action="store_true", help="print each frame as one JSON object")
    return p


def format_frame(event: str, data: dict) -> str:
    """One human line per frame: ``event topic details``."""
    topic = data.get("topic", "-")
    if event == "record":
        return " ".join(["record", topic, *(str(r["$seq"]) for r in data["records"])])
    if event in ("caught-up", "topic-deleted"):
        return f"{event} {topic} head={data['head_seq']}"
    if event == "tombstone":
        return f"tombstone {topic} {data['reason']} {data['gap_from']}-{data['gap_to']}"
    if event == "error":
        return f"error {data.get('code')} {data.get('message')}"
    return f"{event} {json.dumps(data, separators=(',', ':'))}"


def positions(last_event_id: str | None) -> dict[str, int] | None:
    """The per-topic cursors inside a watch id, or None when it is not one we can read (the
    id is opaque to clients; this is only used to start a new session where the old left)."""
    if not last_event_id:
        return None
    try:
        doc = json.loads(base64.urlsafe_b64decode(last_event_id + "=" * (-len(last_event_id) % 4)))
    except (binascii.Error, ValueError):
        return None
    if isinstance(doc, dict) and all(isinstance(v, int) for v in doc.values()):
        return doc
    return None


class WatchClient:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.topics = [t for t in args.topics.split(",") if t]
        self.headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
        self.wid: str | None = args.wid
        self.last_id: str | None = args.last_event_id
        self.retry_ms = DEFAULT_RETRY_MS
        self.printed = 0

    def body(self, start: dict[str, int] | None) -> dict:
        a = self.args
        topics = {}
        for t in self.topics:
            if start is not None and t in start:
                topics[t] = {"from_seq": start[t]}
            else:
                topics[t] = {"tail": True} if a.tail else {"from_seq": a.from_seq}
        body = {"topics": topics, "heartbeat_ms": a.heartbeat_ms, "consistency": a.consistency,
                "include_data": not a.no_data}
        if a.node:
            body["node"] = a.node
        return body

    async def create(self, http: aiohttp.ClientSession) -> None:
        async with http.post(f"{self.args.url}/v0/watch", json=self.body(positions(self.last_id)),
                             headers=self.headers) as r:
            doc = await r.json(content_type=None)
            if r.status in FATAL or r.status == 404:
                raise Fatal(f"POST /v0/watch: {r.status} {json.dumps(doc)}")
            if r.status != 200:
                raise aiohttp.ClientResponseError(r.request_info, (), status=r.status,
                                                  message=json.dumps(doc))
        self.wid = doc["wid"]
        status(f"session {self.wid}")

    def emit(self, event: Event) -> None:
        data = json.loads(event.data)
        if self.args.json:
            line = json.dumps({"event": event.type, "id": event.id or None, "data": data},
                              separators=(",", ":"))
        else:
            line = format_frame(event.type, data)
        print(line, flush=True)
        self.printed += 1
        if self.args.max_frames is not None and self.printed >= self.args.max_frames:
            raise Done

    async def stream_once(self, http: aiohttp.ClientSession) -> None:
        """One GET: print frames until the stream ends. Raises Fatal; returns on any drop."""
        headers = {**self.headers, "Accept": "text/event-stream"}
        if self.last_id:
            headers["Last-Event-ID"] = self.last_id
        silence = 2 * self.args.heartbeat_ms / 1000 + 5
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=silence)
        async with http.get(f"{self.args.url}/v0/watch/{self.wid}", headers=headers,
                            timeout=timeout) as r:
            if r.status == 404:
                status(f"session {self.wid} is gone; creating a new one")
                self.wid = None
                return
            if r.status in FATAL:
                raise Fatal(f"GET /v0/watch/{self.wid}: {r.status} {await r.text()}")
            if r.status != 200:
                status(f"GET /v0/watch/{self.wid}: {r.status}; retrying")
                return
            status(f"streaming {self.wid}"
                   + (f" from Last-Event-ID {self.last_id}" if self.last_id else ""))
            parser = SseParser(self.last_id or "")
            async for chunk in r.content.iter_any():
                for item in parser.feed(chunk):
                    if isinstance(item, Retry):
                        self.retry_ms = item.ms
                    elif isinstance(item, Comment):
                        if self.args.heartbeats:
                            print("hb", flush=True)
                    elif isinstance(item, Event):
                        if item.id:
                            self.last_id = item.id
                        self.emit(item)

    async def run(self) -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                try:
                    if self.wid is None:
                        await self.create(http)
                    await self.stream_once(http)
                    status("stream ended")
                except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                    status(f"connection failed: {type(exc).__name__}: {exc}")
                await asyncio.sleep(self.retry_ms / 1000)  # the server's retry: backoff


def status(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def _main(args: argparse.Namespace) -> int:
    client = WatchClient(args)
    try:
        await asyncio.wait_for(client.run(), args.timeout)
    except Done:
        return 0
    except Fatal as exc:
        status(str(exc))
        return 2
    except asyncio.TimeoutError:
        if args.max_frames is not None:
            status(f"timed out after {args.timeout}s with {client.printed} of {args.max_frames} frames")
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if not [t for t in args.topics.split(",") if t]:
        parser.print_usage(sys.stderr)
        return 2
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
