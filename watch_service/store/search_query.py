"""Reading the search index (``search_documents``, see :mod:`store.search_index`): ranked full
text over the documents' values, one page at a time.

The query text is PostgreSQL's web-search syntax (``websearch_to_tsquery('simple', q)``: words
are ANDed, ``"a phrase"``, ``or``, ``-word``), matched against ``body`` through its GIN index and
ranked by ``ts_rank``; ties are broken by ``doc_key`` so pages are stable. A page is ``limit``
documents after ``offset`` ones; one more is read to tell whether a next page exists.
"""

from __future__ import annotations

from typing import NamedTuple

import psycopg

SEARCH = """
SELECT d.doc_key, d.topic, d.seq, d.ts, d.tag, d.data::text, ts_rank(d.body, q.query) AS rank
  FROM search_documents d, websearch_to_tsquery('simple', %(q)s) AS q(query)
 WHERE d.body @@ q.query
   AND (%(topic)s::text IS NULL OR d.topic = %(topic)s::text)
   AND (%(patterns)s::text[] IS NULL OR d.topic LIKE ANY (%(patterns)s::text[]))
 ORDER BY rank DESC, d.doc_key
 LIMIT %(limit)s OFFSET %(offset)s
"""


class Hit(NamedTuple):
    doc_key: str
    topic: str
    seq: int
    ts: int
    tag: str | None
    data: str  # the document's JSON text, exactly as stored
    rank: float


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching names that start with ``prefix`` taken literally."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


async def search(
    conn: psycopg.AsyncConnection,
    q: str,
    *,
    topic: str | None,
    prefixes: tuple[str, ...] | None,
    limit: int,
    offset: int,
) -> tuple[list[Hit], bool]:
    """The page of hits for ``q`` (in ``topic`` if given, and within ``prefixes`` unless None)
    and whether more follow."""
    params = {
        "q": q,
        "topic": topic,
        "patterns": None if prefixes is None else [like_prefix(p) for p in prefixes],
        "limit": limit + 1,
        "offset": offset,
    }
    cur = await conn.execute(SEARCH, params)
    rows = [Hit(*row) for row in await cur.fetchall()]
    return rows[:limit], len(rows) > limit
