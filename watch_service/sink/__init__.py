"""The sink: an SSE watch client that keeps the landing zone (append-only Parquet segments)
and the search index (PostgreSQL full text) in sync with a set of topics, and the project's
one SSE client (``client.watch``, also behind ``auditsync watch``).

Pure parts: ``sse`` (the SSE parser), ``rows`` (frames → landing rows, cursors that never move
backwards), ``faults``, ``backoff``, ``progress``; composite ids come from ``protocol.cursor``.
I/O: ``connection`` (one session's POST and GET), ``client`` (the reconnecting client and its
public ``watch`` iterator), ``landing`` (segments, state, faults through ``storage``) and
``lock`` (one sink per consumer), ``indexer`` (PostgreSQL),
``spool`` (buffer and durable commit), ``consumer`` (the sink's loop), ``command`` (``auditsync
sink``), ``watch_command`` (``auditsync watch``). ``main`` and ``build_parser`` import the heavy
parts lazily, so importing a pure module (``watch_service.sink.sse``) does not pull in aiohttp,
pyarrow or uvloop.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """``auditsync sink``: run until SIGTERM/SIGINT; returns the exit status."""
    from watch_service.sink.command import main as run

    return run(argv, environ)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The ``auditsync sink`` flags (on ``parser`` if given)."""
    from watch_service.sink.config import build_parser as build

    return build(parser)


__all__ = ["build_parser", "main"]
