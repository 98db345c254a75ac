"""compact's cursor_before, the JDBC URL conversion, and partitioned JDBC reads of the real
test PostgreSQL (exact rows, exact JSON text)."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from spark_jobs.common import jdbc
from spark_jobs.steps.compact.main import Segment, first_starts, read_footers
from spark_jobs.steps.compact.transforms import LAST_FRAMES, compact
from spark_jobs.steps.reconcile.scope import consumer_scope
from spark_jobs.warehouse.schemas import LANDING, columns
from watch_service.protocol.landing import COLUMN_NAMES
from watch_service.sink.landing import Landing
from watch_service.storage import Storage

from ..support import unique
from .builders import Stream, frame_id

pytestmark = pytest.mark.spark


def test_cursor_before_is_the_topic_cursor_in_the_previous_frame_id(spark):
    s = (
        Stream("c", {"a": 3, "b": 0})
        .records("b", [1, 2])
        .records("a", [4, 5])
        .caught_up("b", 9)
        .records("a", [6])
    )
    garbled = list(s.rows[-1])
    garbled[3] = "not-a-cursor!"  # an opaque id: the next frame learns nothing from it
    other = Stream("d", {"a": 0}).records("a", [1])
    rows = s.rows[:-1] + [tuple(garbled)] + other.rows
    got = {
        (r.consumer, r.frame_no, r.seq): r.cursor_before
        for r in compact(spark.createDataFrame(rows, LANDING)).collect()
    }
    assert got == {
        ("c", 1, 1): None,
        ("c", 1, 2): None,  # the consumer's first frame
        ("c", 2, 4): 3,
        ("c", 2, 5): 3,  # a's start, from frame 1's id
        ("c", 3, None): 2,
        ("c", 4, 6): 5,
        ("d", 1, 1): None,
    }
    assert columns(compact(spark.createDataFrame(rows, LANDING)).schema)[: len(LANDING)] == columns(
        LANDING
    )


def test_a_consumers_start_comes_from_its_first_segments_footer(spark, tmp_path):
    """The sink lost seq 1 of ``a``, the first item of its very first frame: without the
    session's start the frame shows ``a`` starting at 1 and seq 1 is out of scope; the first
    segment's footer (``before_frame_id``) keeps it in scope."""
    landing = Landing(Storage.at(tmp_path), "c")
    landing.open()
    s = Stream("c", {"a": 0, "b": 5}).records("a", [1, 2, 3]).records("b", [6])
    frame_no, fid, seq = (COLUMN_NAMES.index(c) for c in ("frame_no", "frame_id", "seq"))
    assert [r[seq] for r in s.rows if r[frame_no] == 1] == [1, 2, 3]
    rows = s.rows[1:]  # seq 1 lost
    name = landing.write_segment(
        rows, 1, 2, rows[-1][fid], {"a": 3, "b": 6}, frame_id({"a": 0, "b": 5})
    )
    landing.close()
    segments = [Segment("c", f"c/{name}", 1, 2)]
    state = {"consumers": {}}
    starts = first_starts(Storage.at(tmp_path), segments, state)
    assert starts == [("c", 0, frame_id({"a": 0, "b": 5}))]
    # Compacted before: the state holds its last frame, the footer is not read.
    assert first_starts(Storage.at(tmp_path), segments, {"consumers": {"c": {"frame_no": 9}}}) == []
    # The footers compact reads once for the run: the segment's rows and the same start.
    footers = read_footers(Storage.at(tmp_path), segments)
    assert list(footers) == [f"c/{name}"]
    assert footers[f"c/{name}"].rows == len(rows) == 3
    assert first_starts(Storage.at(tmp_path), segments, state, footers) == starts
    items = spark.createDataFrame(rows, LANDING)
    for previous, start in ((None, 1), (spark.createDataFrame(starts, LAST_FRAMES), 0)):
        scope = consumer_scope(compact(items, previous)).filter("topic = 'a'").first()
        assert (scope.start_seq, scope.watermark) == (start, 3)


@pytest.mark.parametrize(
    "url, expected_url, props",
    [
        (
            "postgresql://postgres@127.0.0.1:5433/auditsync",
            "jdbc:postgresql://127.0.0.1:5433/auditsync",
            {"user": "postgres"},
        ),
        (
            "postgres://u:p%40ss@db.example/app?sslmode=require",
            "jdbc:postgresql://db.example:5432/app",
            {"user": "u", "password": "p@ss", "sslmode": "require"},
        ),
        ("postgresql://u@[::1]:6000/x", "jdbc:postgresql://[::1]:6000/x", {"user": "u"}),
    ],
)
def test_jdbc_target(url, expected_url, props):
    target = jdbc.jdbc_target(url)
    assert target.url == expected_url
    assert target.properties == {"driver": jdbc.DRIVER, **props}


def test_jdbc_target_refuses_other_schemes():
    with pytest.raises(ValueError, match="expected postgresql://"):
        jdbc.jdbc_target("mysql://u@h/db")


@pytest.fixture(scope="module")
def source_topic(pg_url):
    """A topic with 300 records whose stored JSON text has spacing and non-ASCII, and a gap."""
    topic = unique("jdbc")
    datas = [f'{{"i": {i},  "s":"zürich {i}", "n":[1, 2]}}' for i in range(1, 301)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO topics (name, head_seq, earliest_seq) VALUES (%s, 300, 1)", (topic,)
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO records (topic, seq, ts, tag, node, meta, data) "
                "VALUES (%s, %s, %s, %s, %s, %s::json, %s::json)",
                [
                    (
                        topic,
                        i,
                        1_000 + i,
                        f"k{i % 7}" if i % 2 else None,
                        "n1" if i % 3 == 0 else None,
                        '{"m": true}' if i == 5 else None,
                        datas[i - 1],
                    )
                    for i in range(1, 301)
                ],
            )
        conn.execute(
            "INSERT INTO gaps (topic, gap_from, gap_to, reason) VALUES (%s, 301, 310, 'ttl')",
            (topic,),
        )
    return topic, datas


def test_partitioned_read_returns_exact_rows_and_json_text(spark, pg_url, source_topic):
    topic, datas = source_topic
    target = jdbc.jdbc_target(pg_url)
    records = jdbc.read_records(spark, target, num_partitions=3)
    assert records.rdd.getNumPartitions() == 3
    mine = sorted(records.filter(records.topic == topic).collect(), key=lambda r: r.seq)
    assert [r.seq for r in mine] == list(range(1, 301))
    assert [r.data for r in mine] == datas  # byte-exact stored text
    assert mine[4].meta == '{"m": true}' and mine[3].meta is None
    assert (mine[2].tag, mine[2].node, mine[2].ts) == ("k3", "n1", 1_003)
    hashed = records.filter(records.topic == topic).selectExpr("seq", "sha2(data, 256) AS h")
    assert {r.seq: r.h for r in hashed.collect()} == {
        i: hashlib.sha256(d.encode()).hexdigest() for i, d in enumerate(datas, 1)
    }
    gaps = jdbc.read_gaps(spark, target)
    assert [tuple(g) for g in gaps.filter(gaps.topic == topic).collect()] == [
        (topic, 301, 310, "ttl")
    ]
