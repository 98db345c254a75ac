"""The search index checked against the source in PostgreSQL (``store/index_verify``): what
it finds wrong in a range, by kind, and the repair that leaves nothing to find."""

from __future__ import annotations

import psycopg
import pytest

from watch_service.store import index_verify as iv
from watch_service.store.search_index import upsert_documents_sync

from ..support import unique

pytestmark = [pytest.mark.pg]

TAGS = {3: "k", 7: "k"}  # one document key over two seqs: 7 is the newest
NODES = {8: "n1"}


def data(seq: int) -> str:
    return f'{{"n":{seq},"who":"source"}}'


def source(conn, topic: str, head: int) -> list[tuple]:
    rows = [(topic, s, 1_000 + s, TAGS.get(s), NODES.get(s), data(s)) for s in range(1, head + 1)]
    conn.execute("INSERT INTO topics (name, head_seq) VALUES (%s, %s)", (topic, head))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO records (topic, seq, ts, tag, node, data) VALUES (%s,%s,%s,%s,%s,%s)",
            rows,
        )
    return [(t, s, ts, tag, d) for t, s, ts, tag, _, d in rows]


def found(conn, topic: str, lo: int, hi: int, filtered=()) -> list[tuple[str, int]]:
    return [(d.kind, d.seq) for d in iv.check(conn, topic, lo, hi, filtered)]


def test_the_check_finds_each_wrong_document_and_the_repair_rights_them(pg_url):
    topic = unique("iv")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        records = source(conn, topic, 10)
        upsert_documents_sync(conn, records)  # as the sink indexes what it receives
        assert found(conn, topic, 0, 100) == []

        conn.execute("DELETE FROM search_documents WHERE doc_key = %s", (f"{topic}/2",))
        conn.execute(
            'UPDATE search_documents SET data = \'{"n":5,"who":"hand"}\' WHERE doc_key = %s',
            (f"{topic}/5",),
        )
        conn.execute(  # the tag's document held by its older seq
            "UPDATE search_documents SET seq = 3, ts = 1003, data = %s::jsonb WHERE doc_key = %s",
            (data(3), f"{topic}/k"),
        )
        upsert_documents_sync(conn, [(topic, 99, 1_099, None, data(99))])  # no such record
        assert found(conn, topic, 0, 100) == [
            ("missing", 2),
            ("stale", 5),
            ("stale", 7),
            ("extra", 99),
        ]
        assert found(conn, topic, 4, 6) == [("stale", 5)]  # only the range's seqs

        assert iv.repair(conn, iv.check(conn, topic, 0, 100)) == 3
        assert found(conn, topic, 0, 100) == []
        cur = conn.execute(
            "SELECT doc_key, seq, data::text FROM search_documents WHERE topic = %s "
            "AND doc_key IN (%s, %s, %s)",
            (topic, f"{topic}/2", f"{topic}/5", f"{topic}/k"),
        )
        assert sorted(cur.fetchall()) == [
            (f"{topic}/2", 2, '{"n": 2, "who": "source"}'),
            (f"{topic}/5", 5, '{"n": 5, "who": "source"}'),
            (f"{topic}/k", 7, '{"n": 7, "who": "source"}'),
        ]


def test_trimmed_seqs_and_filtered_nodes_are_not_defects(pg_url):
    topic = unique("iv")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        records = source(conn, topic, 10)
        upsert_documents_sync(conn, [r for r in records if r[1] != 8])  # n1's record filtered
        assert found(conn, topic, 0, 10) == [("missing", 8)]
        assert found(conn, topic, 0, 10, ["n1"]) == []
        # retention trims 1..4: their documents stay, and are no extra
        conn.execute("DELETE FROM records WHERE topic = %s AND seq <= 4", (topic,))
        conn.execute("UPDATE topics SET earliest_seq = 5 WHERE name = %s", (topic,))
        assert found(conn, topic, 0, 10, ["n1"]) == []
        # a source that went back: 9..10 gone, the head at 8; their documents are extra
        conn.execute("DELETE FROM records WHERE topic = %s AND seq > 8", (topic,))
        conn.execute("UPDATE topics SET head_seq = 8 WHERE name = %s", (topic,))
        assert found(conn, topic, 0, 10, ["n1"]) == [("extra", 9), ("extra", 10)]


def test_marks_name_the_consumers_that_keep_the_index(pg_url):
    consumer = unique("mark")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert consumer not in iv.marks(conn)
        conn.execute(
            "INSERT INTO search_index_marks (consumer, frame_no) VALUES (%s, 12)", (consumer,)
        )
        assert iv.marks(conn)[consumer] == 12
