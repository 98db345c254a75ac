"""The pipeline's side of the index verify (``store/index_verify`` holds the source's side):
the windows a run judged, with their node filters, and how far each topic's re-check of the
verified history (``index_scrubs``, migration 032) has got."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

RUN_WINDOWS = """SELECT consumer, topic, seq_from, seq_to, filter_node FROM reconcile_windows
                  WHERE run_id = %(run_id)s ORDER BY consumer, topic"""
SCRUBS = """SELECT topic, scrubbed_through FROM index_scrubs
             WHERE warehouse = %(warehouse)s AND topic = ANY(%(topics)s::text[])"""
SET_SCRUB = """INSERT INTO index_scrubs (warehouse, topic, scrubbed_through)
               VALUES (%(warehouse)s, %(topic)s, %(through)s)
               ON CONFLICT (warehouse, topic) DO UPDATE
                  SET scrubbed_through = excluded.scrubbed_through, updated_at = now()"""


class Window(NamedTuple):
    """Seqs ``(seq_from, seq_to]`` of ``topic`` a run judged for ``consumer``."""

    consumer: str
    topic: str
    seq_from: int
    seq_to: int
    filter_node: str | None


def run_windows(conn: Any, run_id: str) -> list[Window]:
    with conn.cursor() as cur:
        cur.execute(RUN_WINDOWS, {"run_id": run_id})
        return [Window(*row) for row in cur.fetchall()]


def scrubs(conn: Any, warehouse: str, topics: Iterable[str]) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute(SCRUBS, {"warehouse": warehouse, "topics": sorted(set(topics))})
        return {topic: int(through) for topic, through in cur.fetchall()}


def set_scrubs(conn: Any, warehouse: str, marks: Mapping[str, int]) -> None:
    with conn.cursor() as cur:
        for topic, through in sorted(marks.items()):
            cur.execute(SET_SCRUB, {"warehouse": warehouse, "topic": topic, "through": through})
