"""The search index's two entry points on the test PostgreSQL: the sync writer (the Spark
backfill's, also through ``spark_jobs.steps.backfill.search``) and the async one (the sink's) write
the same documents from the same records, skip what PostgreSQL refuses, and batch large sets."""

from __future__ import annotations

import psycopg
import pytest

from spark_jobs.steps.backfill import search as backfill_search
from tests.support import unique
from watch_service.store.search_index import (
    BATCH,
    Upserted,
    upsert_documents,
    upsert_documents_sync,
)

pytestmark = pytest.mark.pg

POISON = '{"bad":"\\u0000"}'  # jsonb cannot hold it


def records(topic: str) -> list[tuple]:
    return [
        (topic, 1, 10, "k", '{"v":"one"}'),
        (topic, 2, 20, "k", '{"v":"two"}'),
        (topic, 3, 30, None, POISON),
        (topic, 4, 40, None, '{"v":[4]}'),
    ]


def rows(url: str, topic: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT substr(doc_key, length(topic) + 1), seq, ts, tag, data::text, body::text "
            "FROM search_documents WHERE topic = %s ORDER BY doc_key",
            (topic,),
        ).fetchall()


async def test_sync_and_async_writers_write_the_same_documents(pg_url):
    by_sync, by_async, by_backfill = unique("sync"), unique("async"), unique("backfill")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert upsert_documents_sync(conn, records(by_sync)) == Upserted(written=2, refused=1)
        assert upsert_documents_sync(conn, records(by_sync)[:2]) == (1, 0)  # a replay
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await upsert_documents(conn, records(by_async)) == Upserted(written=2, refused=1)
    assert backfill_search.upsert_documents(pg_url, records(by_backfill)) == (2, 1)
    assert (
        rows(pg_url, by_sync)
        == rows(pg_url, by_async)
        == rows(pg_url, by_backfill)
        == [
            ("/4", 4, 40, None, '{"v": [4]}', "'4':1"),
            ("/k", 2, 20, "k", '{"v": "two"}', "'two':1"),
        ]
    )


def test_a_refusal_in_a_later_batch_skips_only_that_document(pg_url):
    topic = unique("batch")
    many = [(topic, seq, seq, None, "{}") for seq in range(1, BATCH + 2)]
    many[BATCH] = (topic, BATCH + 1, BATCH + 1, None, POISON)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert upsert_documents_sync(conn, many) == Upserted(written=BATCH, refused=1)
        count = conn.execute(
            "SELECT count(*) FROM search_documents WHERE topic = %s", (topic,)
        ).fetchone()[0]
    assert count == BATCH
