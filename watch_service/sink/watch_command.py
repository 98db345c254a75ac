"""``auditsync watch``: print the frames of an SSE watch, one line each (seed 002).

It watches through :class:`~watch_service.sink.client.WatchClient` (the project's one SSE
client, whose reconnect rules its module docstring states) and prints one line per frame:
``event topic …`` (``record orders 4097 4098``, ``caught-up orders head=5210``, ``tombstone
orders cap 80000-83000``…) or, with ``--json``, one JSON object per frame. Status goes to stderr.

Exit status: 0 when done (``--max-frames`` printed, or ``--timeout`` reached without
``--max-frames``), 1 when ``--timeout`` ran out before ``--max-frames``, 2 on a request the
server refuses for good (400, 401, 403, 406, an unknown topic) or bad flags.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from urllib.parse import urlsplit

import aiohttp

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol.errors import AuditsyncError
from watch_service.sink.client import WatchClient
from watch_service.sink.connection import (
    Connected,
    Disconnected,
    Frame,
    Heartbeat,
    Opened,
    WatchOptions,
)


class Fatal(AuditsyncError):
    pass


class Done(AuditsyncError):
    pass


def base_url(raw: str) -> str:
    """``--url``: an http(s) base URL with a host, refused at once otherwise (a bare
    ``localhost:8400`` would otherwise be retried for ever)."""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise argparse.ArgumentTypeError(
            f"expected the service's base URL, http://host:port or https://host, got {raw!r}"
        )
    return raw


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default when it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="auditsync watch", description=__doc__.split("\n\n")[0], formatter_class=_Formatter
    )
    p.add_argument(
        "--url", default="http://127.0.0.1:8400", type=base_url, help="the service's base URL"
    )
    p.add_argument("--topics", required=True, help="comma-separated topic names")
    p.add_argument("--from-seq", type=int, default=0, help="deliver seqs after this (all topics)")
    p.add_argument("--tail", action="store_true", help="only records appended after subscribing")
    p.add_argument("--node", help="this node's name: its own records are not delivered")
    p.add_argument("--key", help="bearer key (sent as Authorization: Bearer)")
    p.add_argument(
        "--heartbeat-ms", type=int, default=15000, help="the server sends ': hb' after this silence"
    )
    p.add_argument(
        "--consistency",
        choices=["eventual", "strong"],
        default="eventual",
        help="strong: only records whose commit is flushed",
    )
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
    if event in ("tombstone", "rewound"):
        return f"{event} {topic} {data['reason']} {data['gap_from']}-{data['gap_to']}"
    if event == "error":
        return f"error {data.get('code')} {data.get('message')}"
    return f"{event} {json.dumps(data, separators=(',', ':'))}"


def positions(last_event_id: str | None) -> dict[str, int] | None:
    """The per-topic cursors inside a watch id, or None when it is not one we can read."""
    return cursor_codec.decode(last_event_id)


def options(args: argparse.Namespace) -> WatchOptions:
    return WatchOptions(
        args.url.rstrip("/"),
        tuple(t for t in args.topics.split(",") if t),
        from_seq=args.from_seq,
        tail=args.tail,
        node=args.node,
        key=args.key,
        heartbeat_ms=args.heartbeat_ms,
        consistency=args.consistency,
        include_data=not args.no_data,
    )


class Printer:
    """Prints what the client reports; raises Done after ``--max-frames``, Fatal on refusal."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.printed = 0

    def frame(self, frame: Frame) -> None:
        if self.args.json:
            line = json.dumps(
                {"event": frame.event, "id": frame.id or None, "data": frame.data},
                separators=(",", ":"),
            )
        else:
            line = format_frame(frame.event, frame.data)
        print(line, flush=True)
        self.printed += 1
        if self.args.max_frames is not None and self.printed >= self.args.max_frames:
            raise Done

    async def run(self, client: WatchClient) -> None:
        async with (
            aiohttp.ClientSession() as http,
            contextlib.aclosing(client.items(http)) as items,
        ):
            async for item in items:
                if isinstance(item, Frame):
                    self.frame(item)
                elif isinstance(item, Heartbeat):
                    if self.args.heartbeats:
                        print("hb", flush=True)
                elif isinstance(item, Opened):
                    status(f"session {item.wid}")
                elif isinstance(item, Connected):
                    status(
                        f"streaming {item.wid}"
                        + (
                            f" from Last-Event-ID {item.last_event_id}"
                            if item.last_event_id
                            else ""
                        )
                    )
                elif isinstance(item, Disconnected):
                    if item.fatal:
                        raise Fatal(item.reason)
                    status(f"{item.reason}; reconnecting")


def status(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def _main(args: argparse.Namespace) -> int:
    client = WatchClient(options(args), wid=args.wid, last_event_id=args.last_event_id or "")
    printer = Printer(args)
    try:
        await asyncio.wait_for(printer.run(client), args.timeout)
    except Done:
        return 0
    except Fatal as exc:
        status(str(exc))
        return 2
    except TimeoutError:
        if args.max_frames is not None:
            status(
                f"timed out after {args.timeout}s with {printer.printed} of "
                f"{args.max_frames} frames"
            )
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
