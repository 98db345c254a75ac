"""The synthetic world of ``bench/reconcile.py``: source records generated in PostgreSQL and
one consumer's landing zone derived from them, with a known sprinkle of defects, and the
reconcile counts those defects must produce.

Defects, by seq within each topic: node ``n1`` (the consumer's filter) on ``s % 1000 == 2``;
a second copy on ``s % 500 == 7``; dropped on ``s % 100000 == 11`` (silent gaps); payload
corrupted on ``s % 100000 == 22`` (mismatches); 5 phantoms past each topic's head. The
predicates never overlap, so the expected counts are closed-form.
"""

from __future__ import annotations

import time

import psycopg

from spark_jobs.common import jdbc
from spark_jobs.common import statuses as st
from spark_jobs.warehouse.schemas import LANDING

TOPICS = 4
FRAME = 256
PHANTOMS = 5
TARGET_S = 120

SOURCE_SQL = """
INSERT INTO records (topic, seq, ts, tag, node, meta, data)
SELECT 'bench-' || t, s, 1700000000000 + s, NULL, CASE WHEN s %% 1000 = 2 THEN 'n1' END, NULL,
       json_build_object('i', s, 'user', 'u' || (s %% 997), 'v', md5(s::text))
  FROM generate_series(0, %(topics)s - 1) AS t, generate_series(1, %(per_topic)s) AS s
"""


def _count(n: int, mod: int, rem: int) -> int:
    return (n - rem) // mod + 1 if n >= rem else 0  # s in 1..n with s % mod == rem > 0


def expected(per_topic: int) -> dict[str, int]:
    n, k = per_topic, TOPICS
    filtered, dropped, corrupt = _count(n, 1000, 2), _count(n, 100_000, 11), _count(n, 100_000, 22)
    return {
        st.DELIVERED: k * (n - filtered - dropped - corrupt),
        st.FILTERED: k * filtered,
        st.SILENT_GAP: k * dropped,
        st.MISMATCH: k * corrupt,
        st.PHANTOM: k * PHANTOMS,
        st.DUPLICATE: k * _count(n, 500, 7),
    }


def load_source(url: str, per_topic: int) -> float:
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE records, gaps, topics")
        conn.execute("ALTER TABLE records SET UNLOGGED")  # a throwaway cluster: speed only
        conn.execute("SET synchronous_commit = off")
        conn.execute(
            "INSERT INTO topics (name, head_seq) SELECT 'bench-' || t, %s "
            "FROM generate_series(0, %s - 1) AS t",
            (per_topic, TOPICS),
        )
        conn.execute(SOURCE_SQL, {"topics": TOPICS, "per_topic": per_topic})
        conn.execute("VACUUM ANALYZE records")
    return time.monotonic() - started


def make_landing(spark, target: jdbc.JdbcTarget, per_topic: int, out: str) -> None:
    """One consumer (filter n1) that got the source in 256-record frames, with the defects."""
    from pyspark.sql import functions as F

    src = jdbc.read_records(spark, target, 8)
    t = F.substring_index("topic", "-", -1).cast("long")
    s = F.col("seq")
    frame = (s - 1) / FRAME
    kept = src.filter(~((s % 1000 == 2) | (s % 100_000 == 11)))
    copies = kept.withColumn(
        "copy",
        F.explode(F.when(s % 500 == 7, F.array(F.lit(0), F.lit(1))).otherwise(F.array(F.lit(0)))),
    )
    rows = copies.select(
        "topic",
        "seq",
        "ts",
        "tag",
        "node",
        "meta",
        F.when(s % 100_000 == 22, F.concat("data", F.lit(" ")))
        .otherwise(F.col("data"))
        .alias("data"),
        (t * 100_000_000 + F.floor(frame) + 1 + F.col("copy") * 50_000_000).alias("frame_no"),
        F.least((F.floor(frame) + 1) * FRAME, F.lit(per_topic)).alias("cursor"),
    )
    phantoms = (
        spark.range(1, PHANTOMS + 1)
        .crossJoin(src.select("topic").distinct())
        .select(
            "topic",
            (F.lit(per_topic) + F.col("id")).alias("seq"),
            F.lit(0).cast("long").alias("ts"),
            F.lit(None).cast("string").alias("tag"),
            F.lit(None).cast("string").alias("node"),
            F.lit(None).cast("string").alias("meta"),
            F.lit('{"phantom":true}').alias("data"),
            (t * 100_000_000 + 99_000_000).alias("frame_no"),
            F.lit(per_topic + PHANTOMS).cast("long").alias("cursor"),
        )
    )
    landing = rows.unionByName(phantoms).select(
        F.lit("bench").alias("consumer"),
        F.lit("n1").alias("filter_node"),
        "frame_no",
        F.base64(F.to_json(F.create_map("topic", "cursor"))).alias("frame_id"),
        F.lit(0).cast("long").alias("received_ms"),
        F.lit("record").alias("kind"),
        "topic",
        "cursor",
        "seq",
        "ts",
        "tag",
        "node",
        "meta",
        "data",
        F.sha2("data", 256).alias("data_sha256"),
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("long").alias("gap_from"),
        F.lit(None).cast("long").alias("gap_to"),
        F.lit(per_topic).cast("long").alias("head_seq"),
    )
    landing.select(*LANDING.fieldNames()).write.mode("overwrite").parquet(f"{out}/bench")
