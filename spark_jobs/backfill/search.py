"""Writing repaired records into the search index, from the driver (the backfill set is
small). The statement, the document key and the refusal rule are the sink's
(``watch_service.store.search_index``): one definition for both writers, so a record the sink
indexed and the same record backfilled produce the same document, and rerunning the repair
changes nothing. The same module repairs what verify's index check finds.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from watch_service.store.index_verify import Defect, repair
from watch_service.store.search_index import IndexRecord, Upserted, upsert_documents_sync


def upsert_documents(url: str, records: Iterable[IndexRecord]) -> Upserted:
    """Upsert (topic, seq, ts, tag, data) records; returns (documents written, refused)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return upsert_documents_sync(conn, records)


def repair_index(url: str, defects: Iterable[Defect]) -> int:
    """Put right what the index verify found (``watch_service.store.index_verify``): the wrong
    documents deleted and the source's records upserted with the same statement, in one
    transaction; returns the documents written."""
    with psycopg.connect(url, autocommit=True) as conn:
        return repair(conn, defects)
