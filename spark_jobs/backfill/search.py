"""Writing repaired records into the search index, from the driver (the backfill set is
small). The table, the document key and the upsert statement are the sink's
(``watch_service.store.search_index``): one definition for both writers, so a record the sink
indexed and the same record backfilled produce the same document. The upsert keeps the newest
seq per document key and is idempotent (``WHERE excluded.seq >= search_documents.seq``).

A document PostgreSQL refuses (jsonb cannot hold a ``\\u0000`` that a json column can) is
skipped and counted, as the sink does, so one record cannot block the whole repair.
"""
from __future__ import annotations

from collections.abc import Iterable

import psycopg

from watch_service.store.search_index import UPSERT, documents

BATCH = 5_000
Doc = tuple[str, str, int, int, str | None, str]


def _params(docs: list[Doc]) -> dict[str, list]:
    keys, topics, seqs, ts, tags, datas = (list(col) for col in zip(*docs))
    return {"keys": keys, "topics": topics, "seqs": seqs, "ts": ts, "tags": tags, "datas": datas}


def upsert_documents(url: str, records: Iterable[tuple[str, int, int, str | None, str]]
                     ) -> tuple[int, int]:
    """Upsert (topic, seq, ts, tag, data) records; returns (documents written, refused)."""
    docs = documents(records)
    written = refused = 0
    with psycopg.connect(url, autocommit=True) as conn:
        for start in range(0, len(docs), BATCH):
            batch = docs[start:start + BATCH]
            try:
                with conn.transaction():
                    conn.execute(UPSERT, _params(batch))
                written += len(batch)
                continue
            except psycopg.DataError:
                pass
            for doc in batch:
                try:
                    with conn.transaction():
                        conn.execute(UPSERT, _params([doc]))
                    written += 1
                except psycopg.DataError:
                    refused += 1
    return written, refused
