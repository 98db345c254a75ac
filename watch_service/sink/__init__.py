"""The sink: an SSE watch client that keeps the landing zone (append-only Parquet segments)
and the search index (PostgreSQL full text) in sync with a set of topics.

Pure parts: ``sse`` (the SSE parser), ``rows`` (frames → landing rows), ``faults``,
``backoff``, ``progress``; composite ids come from ``protocol.cursor``. I/O: ``client``
(HTTP), ``durable`` and ``landing`` (files), ``search_index`` (PostgreSQL), ``spool`` (buffer
and durable commit), ``consumer`` (the connection loop), ``command`` (the CLI).
"""
from __future__ import annotations

from .command import main
from .config import build_parser

__all__ = ["build_parser", "main"]
