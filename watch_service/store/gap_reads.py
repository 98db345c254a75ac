"""What the source says of the seqs of one topic nobody copied, read synchronously for the
transparency log's leaves (``spark_jobs.tlog_command``): its ``gaps`` rows (a tombstone leaf
says why a seq was given up) and the seqs it still holds (an uncopied leaf)."""

from __future__ import annotations

from typing import Any

from watch_service.protocol.tombstones import Tombstone

TOPIC_GAPS = """SELECT reason, gap_from, gap_to FROM gaps WHERE topic = %(topic)s
ORDER BY gap_from, gap_to"""


def topic_gaps(conn: Any, topic: str) -> list[Tombstone]:
    """Every recorded gap of ``topic`` in seq order (``conn``: a sync psycopg connection)."""
    return [Tombstone(r, int(a), int(b)) for r, a, b in conn.execute(TOPIC_GAPS, {"topic": topic})]


FIRST_MISSING = """SELECT COALESCE(
  (SELECT %(lo)s::bigint WHERE NOT EXISTS
     (SELECT 1 FROM records WHERE topic = %(topic)s AND seq = %(lo)s)),
  (SELECT r.seq + 1 FROM records r
    WHERE r.topic = %(topic)s AND r.seq >= %(lo)s AND r.seq < %(hi)s
      AND NOT EXISTS (SELECT 1 FROM records n WHERE n.topic = r.topic AND n.seq = r.seq + 1)
    ORDER BY r.seq LIMIT 1),
  %(hi)s::bigint + 1)"""


def first_missing(conn: Any, topic: str, lo: int, hi: int) -> int:
    """The first seq of ``lo..hi`` the source does not hold in ``records`` (``hi + 1`` when
    it holds them all): one index walk of the held run that starts at ``lo``."""
    row = conn.execute(FIRST_MISSING, {"topic": topic, "lo": lo, "hi": hi}).fetchone()
    return int(row[0])
