"""The payload hash and the range digest agree in their three forms (``protocol.hashes``): the
Python one (the sink's ``data_sha256``), the Spark one (reconcile, backfill; the digests of
``reconcile.rewind.range_digests``) and the PostgreSQL one (``store.runs.RANGE_DIGEST``), on
the same texts: ASCII JSON, Unicode outside the BMP, the empty text, and 1 MiB. A change to
any one form (a separator, an encoding, the order) fails here."""

from __future__ import annotations

import hashlib

import psycopg
import pytest
from pyspark.sql import functions as F

from spark_jobs.steps.reconcile.rewind import range_digests
from watch_service.protocol import hashes
from watch_service.protocol.landing import payload_hash
from watch_service.store.runs import RANGE_DIGEST

pytestmark = pytest.mark.spark

MIB = 1 << 20
TEXTS = [
    '{"a":1}',
    '{"k":"héllo — 日本語 🚀","n":-0.5e-3}',
    "",
    '{"x":"' + "é" * ((MIB - 8) // 2) + '"}',  # 1 MiB of UTF-8 bytes, most of them two-byte
]
SEQS = [3, 1, 1024 + 7, 2]  # not in seq order; the digest's block: 0..1023, and one above


def test_the_inputs_are_what_they_say() -> None:
    assert len(TEXTS[3].encode()) == MIB
    assert len(TEXTS[1].encode()) > len(TEXTS[1])  # multi-byte characters
    assert payload_hash("") == hashlib.sha256(b"").hexdigest()


def test_payload_hash_is_the_same_in_python_spark_and_postgresql(spark, pg_url) -> None:
    python = [payload_hash(t) for t in TEXTS]
    assert python == [hashes.payload_hash(t) for t in TEXTS]
    df = spark.createDataFrame([(i, t) for i, t in enumerate(TEXTS)], "i long, data string")
    got = df.select("i", F.expr(hashes.spark_payload_hash("data")).alias("h")).collect()
    spark_form = [r["h"] for r in sorted(got, key=lambda r: r["i"])]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            f"SELECT {hashes.sql_payload_hash('x.t')} FROM unnest(%s::text[]) "
            "WITH ORDINALITY AS x(t, i) ORDER BY x.i",
            (TEXTS,),
        ).fetchall()
    assert spark_form == python
    assert [r[0] for r in rows] == python


def test_range_digest_is_the_same_in_python_spark_and_postgresql(spark, pg_url) -> None:
    records = list(zip(SEQS, TEXTS, strict=True))
    low = [(s, t) for s, t in records if s < 1024]
    high = [(s, t) for s, t in records if s >= 1024]
    python = {(1, 3): hashes.range_digest(low), (1031, 1031): hashes.range_digest(high)}
    # The Python form spelled out: the lines in seq order.
    lines = "".join(f"{s}:{hashlib.sha256(t.encode()).hexdigest()}\n" for s, t in sorted(low))
    assert python[(1, 3)] == hashlib.sha256(lines.encode()).hexdigest()

    rows = [("t", s, 0, None, None, None, t) for s, t in records]
    source = spark.createDataFrame(
        rows, "topic string, seq long, ts long, tag string, node string, meta string, data string"
    )
    spark_form = {
        (r["seq_from"], r["seq_to"]): r["digest"] for r in range_digests(source).collect()
    }
    with psycopg.connect(pg_url) as conn:
        pg_form = {
            key: conn.execute(
                f"SELECT {RANGE_DIGEST} FROM unnest(%s::bigint[], %s::text[]) AS r(seq, data)",
                ([s for s, _ in part], [t for _, t in part]),
            ).fetchone()[0]
            for key, part in (((1, 3), low), ((1031, 1031), high))
        }
    assert spark_form == python
    assert pg_form == python
