"""The ``gaps`` rows of one topic, read synchronously: the transparency log's tombstone leaves
(``spark_jobs.tlog_command``) say why each seq nobody copied was given up."""

from __future__ import annotations

from typing import Any

from watch_service.protocol.tombstones import Tombstone

TOPIC_GAPS = """SELECT reason, gap_from, gap_to FROM gaps WHERE topic = %(topic)s
ORDER BY gap_from, gap_to"""


def topic_gaps(conn: Any, topic: str) -> list[Tombstone]:
    """Every recorded gap of ``topic`` in seq order (``conn``: a sync psycopg connection)."""
    return [Tombstone(r, int(a), int(b)) for r, a, b in conn.execute(TOPIC_GAPS, {"topic": topic})]
