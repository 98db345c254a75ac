"""What maintenance buys a warehouse that many small pipeline runs wrote.

Starts its own throwaway PostgreSQL (the project's embedded cluster, a temp folder, a free
loopback port) and one local Spark session, then makes ``--appends`` (default 200) small
pipeline-like commits to the audit log: each one run's delivered rows (``--rows`` rows over 4
topics, one day: 4 partitions touched), committed with the run's id in the snapshot summary and
recorded in ``pipeline_runs.snapshots`` as the pipeline does. Then, before and after the
maintenance step (``spark_jobs.maintenance.main.run``, retention ``--retention-hours``, default
0: every snapshot no run within the retention references is old):

* data files per warehouse table (and per audit-log partition, the most);
* the time of one more such append (median of ``--samples``), through ``tables.append``;
* the time of a pyiceberg read of one topic (``spark_jobs.readers.audit_log``, no JVM).

Prints the figures, their ratios, the maintenance step's own figures and seconds, and the load
average before and after. Not a test: it reports, it does not assert. Loopback only, bounded
(``--appends`` at most 1,000).
Measured here (2 cores shared with other work, load average 12.5-15.7 throughout): 200
appends of 40 rows in 493 s; before maintenance 800 audit-log data files (200 in each
partition), a one-topic pyiceberg read 0.836 s, an append 3.41 s; maintenance 44.0 s (820
files -> 4, 205 snapshots expired); after it 4 files (1 per partition), the read 0.065 s
(0.08x), the append 3.45 s (1.01x: a Spark job's fixed cost, not the table's size).

``python bench/maintenance.py [--appends 200] [--rows 40] [--samples 5] [--retention-hours 0]
[--quick]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from spark_jobs import readers  # noqa: E402
from spark_jobs.common import tables  # noqa: E402
from spark_jobs.common.session import build_session  # noqa: E402
from spark_jobs.layout import TABLES, Layout  # noqa: E402
from spark_jobs.maintenance import main as maintenance  # noqa: E402
from watch_service.store import runs  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import free_port  # noqa: E402

TOPICS = tuple(f"bench-{i}" for i in range(4))
DAY = dt.date(2026, 11, 26)
TS0 = int(dt.datetime(2026, 11, 26, tzinfo=dt.UTC).timestamp() * 1000)
MAX_APPENDS = 1000


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


class Appender:
    """Pipeline-like commits: run n's rows continue every topic's seqs."""

    def __init__(self, spark, layout: Layout, url: str, rows: int) -> None:
        self.spark, self.layout, self.url, self.rows = spark, layout, url, rows
        self.n = 0
        self.schema = tables.SCHEMAS["audit_log"][0]

    def append(self) -> float:
        self.n += 1
        run_id = f"bench-run-{self.n:05d}"
        per_topic = self.rows // len(TOPICS)
        rows = []
        for t, topic in enumerate(TOPICS):
            for i in range(per_topic):
                seq = (self.n - 1) * per_topic + i + 1
                data = json.dumps({"n": seq, "topic": topic, "run": self.n})
                rows.append(
                    (topic, seq, TS0 + seq * 1000 + t, None, None, None, data, "0" * 64,
                     "delivered", DAY, run_id)
                )  # fmt: skip
        started = time.monotonic()
        df = self.spark.createDataFrame(rows, self.schema)
        tables.append(self.layout, "audit_log", df, {tables.RUN_PROPERTY: run_id})
        seconds = time.monotonic() - started
        snapshot = tables.current_snapshot(self.spark, self.layout, "audit_log")
        assert snapshot is not None  # the append just committed one
        with psycopg.connect(self.url, autocommit=True) as conn:
            runs.start_run(conn, run_id)
            runs.record_snapshots(conn, run_id, self.layout.catalog, {"audit_log": snapshot})
        return seconds


def files(spark, layout: Layout) -> tuple[dict[str, int], int]:
    """Data files per table with a snapshot, and the most in one audit-log partition."""
    out = {}
    for name in TABLES:
        if tables.current_snapshot(spark, layout, name) is not None:
            row = spark.sql(f"SELECT count(*) FROM {layout.table(name)}.data_files").first()
            out[name] = int(row[0]) if row else 0
    row = spark.sql(
        f"SELECT max(n) FROM (SELECT count(*) AS n FROM {layout.table('audit_log')}.data_files "
        f"GROUP BY partition)"
    ).first()
    return out, int(row[0]) if row and row[0] is not None else 0


def measure(spark, layout: Layout, url: str, appender: Appender, samples: int) -> dict:
    per_table, most = files(spark, layout)  # before the sample appends add their own
    appends = [appender.append() for _ in range(samples)]
    readers.audit_log(layout, url, TOPICS[0])  # warm: the first read pays pyiceberg's imports
    reads = []
    for _ in range(samples):
        started = time.monotonic()
        readers.audit_log(layout, url, TOPICS[0])
        reads.append(time.monotonic() - started)
    return {
        "append_s": statistics.median(appends),
        "read_s": statistics.median(reads),
        "files": per_table,
        "most_in_a_partition": most,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--rows", type=int, default=40, help="rows per append (4 topics)")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--retention-hours", type=float, default=0.0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 30 appends, 3 samples")
    args = parser.parse_args()
    if args.quick:
        args.appends, args.samples = 30, 3
    if not 1 <= args.appends <= MAX_APPENDS:
        parser.error(f"--appends must be within 1..{MAX_APPENDS}")
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-maint-"))
    base.chmod(0o755)  # the embedded server runs as the postgres user
    cluster = EmbeddedPostgres(base / "pg", free_port())
    cluster.start()
    spark = None
    try:
        url = cluster.url
        migrate(url)
        spark = build_session(
            "bench-maintenance",
            master="local[2]",
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        layout = Layout("", str(base / "work"), "")
        tables.attach(spark, layout, url)
        appender = Appender(spark, layout, url, args.rows)
        print(f"[bench] {load()}", flush=True)
        started = time.monotonic()
        for i in range(args.appends):
            appender.append()
            if (i + 1) % 50 == 0:
                print(f"[bench] {i + 1} appends ({time.monotonic() - started:.0f} s)", flush=True)
        before = measure(spark, layout, url, appender, args.samples)
        print(f"[bench] before maintenance: {before}  ({load()})", flush=True)
        mparser = maintenance.build_parser()
        margs = mparser.parse_args(
            ["--work", layout.work, "--database-url", url,
             "--snapshot-retention-hours", str(args.retention_hours)]
        )  # fmt: skip
        figures = maintenance.run(spark, margs)
        print(
            f"[bench] maintenance: {figures['seconds']:.1f} s, files "
            f"{figures['files_before']} -> {figures['files_after']}, snapshots expired "
            f"{figures['snapshots_expired']}, orphans removed {figures['orphans_removed']}",
            flush=True,
        )
        after = measure(spark, layout, url, appender, args.samples)
        print(f"[bench] after maintenance:  {after}  ({load()})", flush=True)
        for key in ("append_s", "read_s", "most_in_a_partition"):
            ratio = after[key] / before[key] if before[key] else float("nan")
            print(f"[bench] {key}: {before[key]:.3f} -> {after[key]:.3f} ({ratio:.2f}x)")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
