"""The search index checked against the source, one seq range of one topic at a time, and the
documents it gets wrong repaired (issue 32: the index verified, not trusted).

What the index should hold for a range ``(lo, hi]`` of a topic is what indexing the source
now would give (``store/search_index``): one document per key, ``topic/tag`` or
``topic/seq``, holding the newest seq of that key with its ``ts`` and data. :data:`CHECK`
compares the two in PostgreSQL, where both live, and returns only what differs:

- ``missing``: a source record's key has no document (of a tag's records in the range, the
  newest is the one expected);
- ``stale``: the document differs (seq, ``ts`` or data), unless it is a tag's document held by
  a newer source record of the same tag;
- ``extra``: a document of a seq in the range (at or above the topic's ``earliest_seq``: a
  trimmed record's document stays) that no source record of that key and seq backs.

Records whose data PostgreSQL's jsonb refuses (a ``\\u0000``) are never indexed and never
expected; records of a node every indexing consumer filters out are not expected either. The
reads are the records' primary key and ``search_documents_topic_seq`` (migration 032), bounded
by the range, so a check costs what the range holds.

:func:`repair` deletes the wrong documents and upserts the source's records with the sink's
one statement, in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from watch_service.store.search_index import upsert_documents_sync

MISSING, STALE, EXTRA = "missing", "stale", "extra"
KINDS = (MISSING, STALE, EXTRA)

CHECK = r"""
WITH src AS (
  SELECT DISTINCT ON (doc_key) * FROM (
    SELECT r.seq, r.ts, r.tag, r.data,
           %(topic)s || '/' || coalesce(r.tag, r.seq::text) AS doc_key
      FROM records r
     WHERE r.topic = %(topic)s AND r.seq > %(lo)s AND r.seq <= %(hi)s
       AND strpos(r.data::text, '\u0000') = 0
       AND (r.node IS NULL OR NOT (r.node = ANY(%(filtered)s::text[])))
  ) k ORDER BY doc_key, seq DESC
), judged AS (
  SELECT s.*, CASE
           WHEN d.doc_key IS NULL THEN 'missing'
           WHEN d.seq = s.seq AND d.ts = s.ts AND d.data = s.data::jsonb THEN NULL
           WHEN s.tag IS NOT NULL AND d.seq > s.seq AND EXISTS (
                SELECT 1 FROM records n
                 WHERE n.topic = %(topic)s AND n.seq = d.seq AND n.tag = s.tag) THEN NULL
           ELSE 'stale' END AS kind
    FROM src s LEFT JOIN search_documents d ON d.doc_key = s.doc_key
)
SELECT kind, doc_key, seq, ts, tag, data::text FROM judged WHERE kind IS NOT NULL
UNION ALL
SELECT 'extra', d.doc_key, d.seq, NULL, NULL, NULL
  FROM search_documents d
 WHERE d.topic = %(topic)s AND d.seq > %(lo)s AND d.seq <= %(hi)s
   AND d.seq >= (SELECT coalesce(max(earliest_seq), 1) FROM topics WHERE name = %(topic)s)
   AND NOT EXISTS (SELECT 1 FROM records r
                    WHERE r.topic = %(topic)s AND r.seq = d.seq
                      AND %(topic)s || '/' || coalesce(r.tag, r.seq::text) = d.doc_key)
"""
DELETE_KEYS = "DELETE FROM search_documents WHERE doc_key = ANY(%(keys)s::text[])"
MARKS = "SELECT consumer, frame_no FROM search_index_marks"


class Defect(NamedTuple):
    """One document the index gets wrong; for ``missing``/``stale`` the source record that
    should be there (``ts``, ``tag``, ``data`` as JSON text), for ``extra`` only the key."""

    kind: str
    topic: str
    doc_key: str
    seq: int
    ts: int | None
    tag: str | None
    data: str | None


def check(conn: Any, topic: str, lo: int, hi: int, filtered: Sequence[str] = ()) -> list[Defect]:
    """What the index gets wrong for seqs ``(lo, hi]`` of ``topic``, by seq."""
    params = {"topic": topic, "lo": lo, "hi": hi, "filtered": list(filtered)}
    with conn.cursor() as cur:
        cur.execute(CHECK, params)
        rows = cur.fetchall()
    return sorted(
        (Defect(kind, topic, key, seq, ts, tag, data) for kind, key, seq, ts, tag, data in rows),
        key=lambda d: (d.seq, d.kind),
    )


def repair(conn: Any, defects: Iterable[Defect]) -> int:
    """Delete every wrong document and upsert the source records that belong there, in one
    transaction (``conn`` in autocommit mode); returns how many documents were written."""
    found = list(defects)
    if not found:
        return 0
    keys = sorted({d.doc_key for d in found})
    records = [(d.topic, d.seq, d.ts, d.tag, d.data) for d in found if d.kind != EXTRA]
    with conn.transaction():
        conn.execute(DELETE_KEYS, {"keys": keys})
        done = upsert_documents_sync(conn, records)  # type: ignore[arg-type]
    return done.written


def marks(conn: Any) -> dict[str, int]:
    """The consumers whose sink keeps the search index, with the frame its documents reach
    (``search_index_marks``, written by ``sink/indexer``)."""
    with conn.cursor() as cur:
        cur.execute(MARKS)
        return {c: int(frame) for c, frame in cur.fetchall()}
