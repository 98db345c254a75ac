"""Writing repaired records into the search index, from the driver (the backfill set is
small). The statement, the document key and the refusal rule are the sink's
(``watch_service.store.search_index``): one definition for both writers, so a record the sink
indexed and the same record backfilled produce the same document, and rerunning the repair
changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from watch_service.store.search_index import IndexRecord, Upserted, upsert_documents_sync


def upsert_documents(url: str, records: Iterable[IndexRecord]) -> Upserted:
    """Upsert (topic, seq, ts, tag, data) records; returns (documents written, refused)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return upsert_documents_sync(conn, records)
