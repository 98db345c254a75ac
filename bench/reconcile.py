"""Reconcile throughput: the Spark reconcile job against datacompy's Spark compare and a
PostgreSQL-only anti-join, on the same source and deliveries.

Starts its own throwaway PostgreSQL (the project's embedded cluster, a temp folder, a free
loopback port), and for each size (source records in 4 topics; 1 M, ``--full`` adds 10 M):

* generates the source in ``records`` with SQL, and a landing zone for one consumer from it
  with Spark, carrying a known sprinkle of defects (``_reconcile_data.py``): node-filtered
  records (1 in 1,000), extra copies (1 in 500), dropped records and corrupted payloads (1 in
  100,000 each) and 5 phantoms per topic;
* times ``compact`` once, then ``reconcile`` (JDBC read partitioned by seq, classify, write the
  detail Parquet, collect the summary) and checks its counts against the known defects;
* times datacompy's ``SparkSQLCompare`` of the same source and delivered hashes on
  (topic, seq), and PostgreSQL alone: deliveries loaded with COPY, then one full-join query.

Prints wall times (medians when repeated), rows/s and ratios, and whether 10 M reconciles in
<= 120 s and faster than datacompy. Not a test: it reports, it does not assert.
Measured here (2 cores, load average 5-8 from other work): 1 M reconciled in 31.5 s vs
datacompy 126 s (4.0x) and PostgreSQL 6.9 s; 10 M in 62.7 s vs datacompy 1,246 s (19.9x)
and PostgreSQL 99.7 s (COPY 18.7 + query 81.0).
After the incremental pipeline (session 2, load 0.2): 10 M reconciled in 58.8 s (JVM CPU 100 s).
``python bench/reconcile.py [--full | --sizes N,...] [--repeats N] [--datacompy-max-rows N]
[--quick]``; the default is 1 M rows (reconcile median of 3, datacompy and PostgreSQL once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from _proc import cpu_s  # noqa: E402 (bench/)
from _reconcile_data import TOPICS, expected, load_source, make_landing  # noqa: E402 (bench/)

from spark_jobs.common import jdbc  # noqa: E402
from spark_jobs.common import statuses as st  # noqa: E402
from spark_jobs.common.session import build_session  # noqa: E402
from spark_jobs.steps.compact.transforms import compact  # noqa: E402
from spark_jobs.steps.reconcile.main import held_locally  # noqa: E402
from spark_jobs.steps.reconcile.transforms import reconcile, summarize  # noqa: E402
from spark_jobs.warehouse.schemas import DELIVERIES, DETAIL, LANDING  # noqa: E402
from watch_service.store import runs  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import free_port  # noqa: E402

TARGET_S = 120

PG_QUERY = """
WITH src AS (SELECT topic, seq, node, encode(sha256(convert_to(data::text, 'UTF8')), 'hex') AS h
               FROM records),
     dl AS (SELECT topic, seq, count(*) AS copies, array_agg(DISTINCT data_sha256) AS hs
              FROM bench_deliveries GROUP BY topic, seq)
SELECT CASE WHEN s.seq IS NULL THEN 'phantom'
            WHEN d.seq IS NULL AND s.node = 'n1' THEN 'filtered'
            WHEN d.seq IS NULL THEN 'silent_gap'
            WHEN s.h = ANY(d.hs) THEN 'delivered' ELSE 'mismatch' END,
       count(*), sum(coalesce(d.copies, 1) - 1)
  FROM src s FULL JOIN dl d USING (topic, seq) GROUP BY 1
"""


_T = TypeVar("_T")


def timed(spark, fn: Callable[[], _T], repeats: int) -> tuple[float, float, _T]:
    """Median wall seconds, median JVM CPU seconds, and the last result of ``fn()``."""
    pid = spark.sparkContext._gateway.proc.pid
    walls, cpus, results = [], [], []
    for _ in range(repeats):
        started, cpu0 = time.monotonic(), cpu_s(pid)
        results.append(fn())
        walls.append(time.monotonic() - started)
        cpus.append(cpu_s(pid) - cpu0)
    return statistics.median(walls), statistics.median(cpus), results[-1]


def run_reconcile(
    spark, url: str, target, deliveries_path: str, detail_path: str
) -> dict[str, int]:
    """What reconcile's main does, less the PostgreSQL summary write."""
    deliveries = spark.read.schema(DELIVERIES).parquet(deliveries_path)

    def heads_of(topics: list[str]) -> dict[str, int]:
        with psycopg.connect(url) as conn:
            return runs.source_heads(conn, topics)

    held = held_locally(spark, deliveries, heads_of)
    records, gaps = jdbc.read_records(spark, target, 4), jdbc.read_gaps(spark, target)
    reconcile(deliveries, records, gaps, held.scope, held.signalled).write.mode(
        "overwrite"
    ).parquet(detail_path)
    detail = spark.read.schema(DETAIL).parquet(detail_path)
    counts: dict[str, int] = {}
    for row in summarize(detail, "bench").collect():
        counts[row["status"]] = counts.get(row["status"], 0) + row["count"]
    return counts


def run_datacompy(spark, target, deliveries_path: str) -> int:
    from datacompy.spark import SparkSQLCompare
    from pyspark.sql import functions as F

    source = jdbc.read_records(spark, target, 4).select(
        "topic", "seq", F.sha2("data", 256).alias("h")
    )
    delivered = (
        spark.read.schema(DELIVERIES)
        .parquet(deliveries_path)
        .select("topic", "seq", F.sha2("data", 256).alias("h"))
    )
    cmp = SparkSQLCompare(
        spark, source, delivered, join_columns=["topic", "seq"], cache_intermediates=True
    )
    differing = cmp.df1_unq_rows.count() + cmp.df2_unq_rows.count()
    return differing + cmp.intersect_rows.count() - cmp.count_matching_rows()


def run_pg(url: str, deliveries_path: str) -> tuple[float, float, dict]:
    table = pq.read_table(deliveries_path, columns=["topic", "seq", "data_sha256"])
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_deliveries")
        conn.execute(
            "CREATE UNLOGGED TABLE bench_deliveries (topic text, seq bigint, data_sha256 text)"
        )
        buffer = pa.BufferOutputStream()
        pacsv.write_csv(table, buffer, pacsv.WriteOptions(include_header=False))
        with conn.cursor().copy("COPY bench_deliveries FROM STDIN (FORMAT csv)") as copy:
            copy.write(buffer.getvalue().to_pybytes())
        conn.execute("ANALYZE bench_deliveries")
        loaded = time.monotonic() - started
        conn.execute("SET work_mem = '1GB'")
        q0 = time.monotonic()
        rows = conn.execute(PG_QUERY).fetchall()
        query = time.monotonic() - q0
    counts = {status: n for status, n, _ in rows}
    counts[st.DUPLICATE] = sum(int(d or 0) for _, _, d in rows)
    return loaded, query, counts


def bench_size(spark, url: str, work: Path, n: int, repeats: int, args) -> dict:
    per_topic = n // TOPICS
    target = jdbc.jdbc_target(url)
    loadavg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n== {n:,} source records ({TOPICS} topics x {per_topic:,}); load average {loadavg}",
        flush=True,
    )
    print(f"source generated in PostgreSQL in {load_source(url, per_topic):.1f} s", flush=True)
    landing, deliveries = str(work / f"landing-{n}"), str(work / f"deliveries-{n}")
    t0 = time.monotonic()
    make_landing(spark, target, per_topic, landing)
    print(f"landing zone written in {time.monotonic() - t0:.1f} s", flush=True)
    t_compact, c_compact, _ = timed(
        spark,
        lambda: (
            compact(spark.read.schema(LANDING).parquet(f"{landing}/*"))
            .write.mode("overwrite")
            .partitionBy("consumer")
            .parquet(deliveries)
        ),
        1,
    )
    print(f"compact: {t_compact:.1f} s (JVM CPU {c_compact:.0f} s)", flush=True)
    t_rec, c_rec, counts = timed(
        spark, lambda: run_reconcile(spark, url, target, deliveries, str(work / "detail")), repeats
    )
    want = expected(per_topic)
    ok = all(counts.get(k, 0) == v for k, v in want.items())
    print(
        f"reconcile: {t_rec:.1f} s, JVM CPU {c_rec:.0f} s ({n / t_rec:,.0f} source rows/s, "
        f"median of {repeats}); counts {'match' if ok else 'DIFFER'}: {counts}",
        flush=True,
    )
    result: dict[str, Any] = {"n": n, "reconcile": t_rec, "ok": ok}
    if n <= args.datacompy_max_rows:
        t_dc, c_dc, differing = timed(spark, lambda: run_datacompy(spark, target, deliveries), 1)
        result["datacompy"] = t_dc
        print(
            f"datacompy SparkSQLCompare: {t_dc:.1f} s, JVM CPU {c_dc:.0f} s "
            f"({n / t_dc:,.0f} rows/s), {differing:,} differing rows; reconcile is "
            f"{t_dc / t_rec:.2f}x faster (CPU {c_dc / max(c_rec, 1e-9):.2f}x)",
            flush=True,
        )
    if not args.skip_pg:
        load, query, pg_counts = run_pg(url, deliveries)
        result["pg"] = (load, query)
        print(
            f"PostgreSQL only: COPY {load:.1f} s + query {query:.1f} s, i.e. "
            f"{query / t_rec:.2f}x reconcile's time ({(load + query) / t_rec:.2f}x with the "
            f"COPY); counts {'match' if pg_counts == want else pg_counts}",
            flush=True,
        )
    return result


def report(results: list[dict]) -> None:
    print("\n== summary")
    for r in results:
        line = f"{r['n']:>12,} rows: reconcile {r['reconcile']:6.1f} s"
        if "datacompy" in r:
            line += f", datacompy {r['datacompy']:6.1f} s ({r['datacompy'] / r['reconcile']:.2f}x)"
        if "pg" in r:
            line += f", PostgreSQL {sum(r['pg']):6.1f} s ({sum(r['pg']) / r['reconcile']:.2f}x)"
        print(line + ("" if r["ok"] else "  COUNTS DIFFER"))
        if r["n"] >= 10_000_000:
            print(
                f"target 10 M in <= {TARGET_S} s: "
                f"{'met' if r['reconcile'] <= TARGET_S else 'NOT met'}"
            )
    compared = [r for r in results if "datacompy" in r]
    if compared:
        faster = all(r["reconcile"] < r["datacompy"] for r in compared)
        sizes = ", ".join(f"{r['n']:,}" for r in compared)
        print(f"faster than datacompy at {sizes} rows: {'yes' if faster else 'NO'}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes", default="1000000", help="source sizes (default 1 M, ~5 min); --full adds 10 M"
    )
    parser.add_argument("--full", action="store_true", help="1 M and 10 M (~10 min more)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="reconcile runs per size (default: 3 below 5 M rows, else 1)",
    )
    parser.add_argument("--quick", action="store_true", help="1 M rows, one run, no datacompy")
    parser.add_argument(
        "--datacompy-max-rows",
        type=int,
        default=1_000_000,
        help="run datacompy up to this size (it took ~20 min at 10 M)",
    )
    parser.add_argument("--skip-pg", action="store_true")
    parser.add_argument("--driver-memory", default="6g")
    args = parser.parse_args(argv)
    sizes = [1_000_000, 10_000_000] if args.full else [int(x) for x in args.sizes.split(",")]
    if args.quick:
        sizes, args.datacompy_max_rows = [1_000_000], 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run_all's backstop: clean up
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-reconcile-"))
    cluster = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="auditsync-bench-pg-")), free_port())
    spark = None
    results = []
    try:
        url = cluster.start()
        migrate(url)
        spark = build_session(
            "auditsync-bench-reconcile",
            "local[2]",
            {
                "spark.driver.memory": args.driver_memory,
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "16",
            },
        )
        spark.sparkContext.setLogLevel("ERROR")
        for n in sizes:
            repeats = 1 if args.quick else (args.repeats or (3 if n < 5_000_000 else 1))
            results.append(bench_size(spark, url, base / "work", n, repeats, args))
    finally:
        if spark is not None:
            spark.stop()
        cluster.destroy()
        shutil.rmtree(base, ignore_errors=True)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
