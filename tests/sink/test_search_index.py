"""The search index on the test PostgreSQL: newest seq per key wins, replays change nothing,
full-text search works, poison documents are skipped, an unreachable database is reported."""

import psycopg
import pytest

from watch_service.store.search_index import SearchIndex, doc_key, documents

from ..support import free_port, unique


@pytest.mark.unit
def test_doc_keys_and_newest_per_key():
    assert doc_key("t", "order-1", 5) == "t/order-1" and doc_key("t", None, 5) == "t/5"
    docs = documents(
        [
            ("t", 1, 10, "k", "{}"),
            ("t", 3, 30, "k", "[3]"),
            ("t", 2, 20, "k", "[2]"),
            ("t", 4, 40, None, "4"),
        ]
    )
    assert docs == [("t/k", "t", 3, 30, "k", "[3]"), ("t/4", "t", 4, 40, None, "4")]


pg = pytest.mark.pg


async def fetch(url: str, topic: str) -> dict:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT doc_key, seq, ts, tag, data::text FROM search_documents WHERE topic = %s",
            (topic,),
        )
        return {r[0]: r[1:] for r in await cur.fetchall()}


@pg
async def test_newest_seq_wins_and_replays_are_idempotent(pg_url):
    topic, index = unique("s"), SearchIndex(pg_url)
    try:
        assert (
            await index.apply(
                [(topic, 2, 20, "k", '{"v":"two"}'), (topic, 3, 30, None, '{"v":"three"}')]
            )
            == 2
        )
        await index.apply([(topic, 1, 10, "k", '{"v":"one"}')])  # older: ignored
        await index.apply([(topic, 2, 20, "k", '{"v":"two"}')])  # replay: same row
        assert await fetch(pg_url, topic) == {
            f"{topic}/k": (2, 20, "k", '{"v": "two"}'),
            f"{topic}/3": (3, 30, None, '{"v": "three"}'),
        }
        await index.apply([(topic, 5, 50, "k", '{"v":"five"}')])
        assert (await fetch(pg_url, topic))[f"{topic}/k"][0] == 5
    finally:
        await index.close()
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute(
            "SELECT doc_key FROM search_documents WHERE topic = %s "
            "AND body @@ to_tsquery('simple', 'three')",
            (topic,),
        )
        assert [r[0] for r in await cur.fetchall()] == [f"{topic}/3"]


@pg
async def test_a_document_postgres_refuses_is_skipped_not_wedging(pg_url):
    topic, index = unique("s"), SearchIndex(pg_url)
    try:
        await index.apply([(topic, 1, 1, None, '{"bad":"\\u0000"}'), (topic, 2, 2, None, "{}")])
        assert index.rejected == 1
        assert set(await fetch(pg_url, topic)) == {f"{topic}/2"}
    finally:
        await index.close()


@pg
async def test_unreachable_database_raises_operational_error():
    index = SearchIndex(f"postgresql://postgres@127.0.0.1:{free_port()}/x", connect_timeout_s=1)
    with pytest.raises(psycopg.OperationalError):
        await index.apply([("t", 1, 1, None, "{}")])
