"""A year, simulated: one ordinary ``auditsync pipeline run`` beside a year of history against
the same run on a fresh deployment, on file and on S3.

Per storage it starts two throwaway PostgreSQL clusters (the embedded cluster, temp folders,
free loopback ports), and for S3 the tests' S3 server (S3Proxy, loopback, refusing unsigned
requests). Each deployment gets one consumer writing ``--initial`` records to 4 topics
(``bench/pipeline.py``'s ``World``: records by COPY, sink segments by pyarrow) and one untimed
first run (a cold ``auditsync pipeline run``). The **year** deployment is then seeded, fast:

* ``--runs`` runs' worth of run rows (default 35,040: a year of 15-minute runs), with
  ``generate_series``: ``pipeline_runs``, ``reconcile_runs``, one ``reconcile_windows`` and one
  ``reconcile_summary`` row each, one partial ``reconcile_digests`` range each (8 seqs of a
  quiet topic whose 8 x runs source records are inserted too, so merging re-hashes real rows),
  and one ``alerts_sent`` row each; then one prune (``lifecycle.prune``, timed) leaves them as
  every run's prune would have: ``--keep`` runs, the rest rolled up;
* the kept runs' Iceberg per-run rows and the snapshots maintenance keeps: per run-partitioned
  table (detail, summary, remaining, ledger) one pyiceberg append of a row per kept run (a
  partition each), then one-row appends up to ``--snapshots`` commits (maintenance keeps about
  one per kept run: ``--snapshots 96``; each pyiceberg commit here takes 0.3-1 s);
* consumed landing segments (``--segments`` on file, ``--s3-segments`` on S3; 7,200 an hour in
  dated folders before the consumer's current one, numbered below its compacted frames):
  hard links to one tiny segment, on file in the landing folder and on S3 in the S3 server's
  own folder (S3Proxy's filesystem backend keeps an object as the file ``bucket/key``; mode
  0600, as it writes them), so 100,000 on S3 take seconds instead of one PUT each; every read
  of them (compact's LIST calls) still goes through the S3 API (``bench/year_landing.py``).

Then, ``--repeats`` times, interleaved (so both see the same load), both deployments get
``--new`` new records and one timed cold ``auditsync pipeline run --keep-runs K`` (wall time of
the whole process: JVM start, compact, reconcile, backfill, verify, prune). Prints the medians,
the ratio year / fresh (target <= 1.1) and the load average. Not a test: it reports, it does not
assert. The defaults are the issue's full scale (a year of runs, 1,000,000 segments on file,
100,000 on S3, 96 snapshots per run table); about 15 minutes per storage on a quiet machine.
``python bench/year.py [--runs 35040] [--keep 96] [--segments 1000000] [--s3-segments 100000]
[--snapshots 96] [--initial 20000] [--new 2000] [--repeats 3] [--storages file,s3]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psycopg  # noqa: E402
import pyarrow as pa  # noqa: E402
from pipeline import World, load  # noqa: E402
from psycopg import sql  # noqa: E402
from year_landing import seed_history  # noqa: E402

from spark_jobs import lifecycle  # noqa: E402
from spark_jobs.warehouse.layout import Layout  # noqa: E402
from watch_service.protocol.landing_keys import folder_of  # noqa: E402
from watch_service.storage import Storage  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.store.runs import RANGE_DIGEST  # noqa: E402
from watch_service.tools.local import free_port  # noqa: E402

CONSUMER = "bench"
QUIET = "history"  # the quiet topic the seeded runs judged
PER_RUN = 8  # seeded seqs per run: a partial digest range in a 1,024-seq block
RUN_TABLES = ("detail", "summary", "remaining", "ledger")
AUDITSYNC = Path(sys.executable).parent / "auditsync"
STEP_LINE = re.compile(r"^\[pipeline\] (compact|reconcile|backfill|verify)\s+([0-9.]+) s", re.M)
PRUNE_LINE = re.compile(r"^\[pipeline\] retention: removed .* \(([0-9.]+) s\)$", re.M)
TABLES = (
    "pipeline_runs",
    "reconcile_runs",
    "reconcile_windows",
    "reconcile_summary",
    "reconcile_digests",
    "alerts_sent",
)

SEED_SQL = [
    "INSERT INTO topics (name, head_seq) VALUES (%(quiet)s, %(seqs)s)",
    """INSERT INTO records (topic, seq, ts, data)
       SELECT %(quiet)s, g, g, json_build_object('n', g) FROM generate_series(1, %(seqs)s) g""",
    """INSERT INTO pipeline_runs (run_id, warehouse, status, started_at, updated_at, finished_at,
                                  defects_found, defects_remaining)
       SELECT 'year-' || lpad(i::text, 6, '0'), %(wh)s, 'passed',
              %(t0)s + i * interval '15 minutes', %(t0)s + i * interval '15 minutes',
              %(t0)s + i * interval '15 minutes' + interval '1 minute', 0, 0
         FROM generate_series(1, %(runs)s) i""",
    """INSERT INTO reconcile_runs (run_id, warehouse, batch_from, batch_to, recorded_at)
       SELECT 'year-' || lpad(i::text, 6, '0'), %(wh)s, 1, 0,
              %(t0)s + i * interval '15 minutes' + interval '30 seconds'
         FROM generate_series(1, %(runs)s) i""",
    """INSERT INTO reconcile_windows (run_id, consumer, topic, start_seq, seq_from, seq_to)
       SELECT 'year-' || lpad(i::text, 6, '0'), %(consumer)s, %(quiet)s, 0,
              %(per)s * (i - 1), %(per)s * i
         FROM generate_series(1, %(runs)s) i""",
    """INSERT INTO reconcile_summary (run_id, consumer, topic, status, count)
       SELECT 'year-' || lpad(i::text, 6, '0'), %(consumer)s, %(quiet)s, 'delivered', %(per)s
         FROM generate_series(1, %(runs)s) i""",
    f"""INSERT INTO reconcile_digests (warehouse, topic, seq_from, seq_to, digest, run_id)
        SELECT %(wh)s, %(quiet)s, %(per)s * (i - 1) + 1, %(per)s * i,
               (SELECT {RANGE_DIGEST} FROM records r WHERE r.topic = %(quiet)s
                   AND r.seq BETWEEN %(per)s * (i - 1) + 1 AND %(per)s * i),
               'year-' || lpad(i::text, 6, '0')
          FROM generate_series(1, %(runs)s) i""",
    """INSERT INTO alerts_sent (dag_id, run_id, kind, channel, sent_at)
       SELECT 'audit_sync', 'year-' || lpad(i::text, 6, '0'), 'defects_found', 'email',
              %(t0)s + i * interval '15 minutes' + interval '1 minute'
         FROM generate_series(1, %(runs)s) i""",
]


def counts(url: str) -> dict[str, int]:
    """Each run table's row count (one deployment per cluster: all its rows are the year's)."""
    count = sql.SQL("SELECT count(*) FROM {}")
    with psycopg.connect(url, autocommit=True) as conn:
        return {t: conn.execute(count.format(sql.Identifier(t))).fetchall()[0][0] for t in TABLES}


class Deployment:
    """One PostgreSQL, one consumer's landing zone, one warehouse."""

    def __init__(self, base: Path, root: str, name: str, frames_below: int) -> None:
        self.name = name
        self.pg = EmbeddedPostgres(base / f"pg-{name}", free_port())
        self.pg.start()
        migrate(self.pg.url)
        self.landing, self.work = f"{root}/{name}/landing", f"{root}/{name}/warehouse"
        self.world = World(self.pg.url, self.landing, f"{name}")
        self.world.frame_no = frames_below  # the seeded history's frames come first
        self.runs = 0
        self.last_steps = ""  # the last run's seconds per step, as the CLI printed them

    def add(self, records: int) -> None:
        self.world.folder = folder_of(dt.datetime.now(dt.UTC))
        self.world.add(records)

    def run(self, keep: int) -> float:
        """One cold ``auditsync pipeline run``: its wall seconds."""
        self.runs += 1
        run_id = f"{self.name}-{self.runs:03d}"
        cmd = [str(AUDITSYNC), "pipeline", "run", "--landing", self.landing, "--work", self.work]
        cmd += ["--run-id", run_id, "--database-url", self.pg.url, "--keep-runs", str(keep)]
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        seconds = time.monotonic() - t0
        if done.returncode != 0:
            raise SystemExit(f"{self.name} run {run_id} failed:\n{done.stdout}\n{done.stderr}")
        steps = {m[1]: float(m[2]) for m in STEP_LINE.finditer(done.stdout)}
        pruned = PRUNE_LINE.search(done.stdout)
        if pruned:
            steps["prune"] = float(pruned[1])
        rest = seconds - sum(steps.values())  # the process and the JVM's start
        self.last_steps = "  ".join(f"{k} {v:.1f}" for k, v in steps.items()) + f"  rest {rest:.1f}"
        return seconds

    @property
    def layout(self) -> Layout:
        return Layout(self.landing, self.work, f"{self.name}-{self.runs:03d}")

    def stop(self) -> None:
        self.pg.stop()


def value(kind: pa.DataType) -> object:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "x"
    if pa.types.is_integer(kind):
        return 1
    if pa.types.is_boolean(kind):
        return False
    if pa.types.is_timestamp(kind):
        return dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    if pa.types.is_date(kind):
        return dt.date(2026, 1, 1)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return []
    raise ValueError(f"no seed value for {kind}")


def seed_row(schema: pa.Schema, column: str, run_id: str) -> dict[str, object]:
    """A row of ``schema`` for ``run_id``: the quiet topic, NULL where allowed, else a value."""
    return {
        f.name: run_id
        if f.name == column
        else (QUIET if f.name == "topic" else None if f.nullable else value(f.type))
        for f in schema
    }


def seed_iceberg(dep: Deployment, run_ids: list[str], snapshots: int) -> int:
    """Per run-partitioned table: one append of a row per kept run (a partition each), then
    more one-row appends up to ``snapshots`` commits; returns the commits made."""
    from spark_jobs.warehouse import readers, tables

    commits = 0
    for name in RUN_TABLES:
        table = readers.load(dep.layout, dep.pg.url, name)
        schema = table.schema().as_arrow()
        column = tables.run_column(name)

        table.append(
            pa.Table.from_pylist([seed_row(schema, column, r) for r in run_ids], schema=schema)
        )
        for i in range(1, snapshots):
            table.append(
                pa.Table.from_pylist(
                    [seed_row(schema, column, run_ids[i % len(run_ids)])], schema=schema
                )
            )
        commits += max(1, snapshots)
    return commits


def seed_year(dep: Deployment, args: argparse.Namespace, kind: str) -> None:
    url, warehouse = dep.pg.url, dep.layout.catalog
    t0 = time.monotonic()
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=1, minutes=15 * args.runs)
    with psycopg.connect(url, autocommit=True) as conn:
        key = {"wh": warehouse, "runs": args.runs, "seqs": args.runs * PER_RUN, "per": PER_RUN}
        key |= {"quiet": QUIET, "consumer": CONSUMER, "t0": start}
        for statement in SEED_SQL:
            conn.execute(statement, key)
        conn.execute("ANALYZE")
    print(f"   seeded {args.runs:,} runs' rows in {time.monotonic() - t0:.1f} s", flush=True)
    print(f"   rows before the prune: {counts(url)}", flush=True)
    t0 = time.monotonic()
    pruned = lifecycle.prune(url, dep.layout, args.keep)
    print(
        f"   one prune of {len(pruned):,} runs: {time.monotonic() - t0:.1f} s; rows after: "
        f"{counts(url)} ({load()})",
        flush=True,
    )
    with psycopg.connect(url, autocommit=True) as conn:
        kept = [
            r
            for (r,) in conn.execute(
                "SELECT run_id FROM pipeline_runs WHERE run_id ~ '^year-[0-9]{6}$' ORDER BY run_id"
            ).fetchall()
        ]
    t0 = time.monotonic()
    commits = seed_iceberg(dep, kept, args.snapshots)
    print(
        f"   {commits} Iceberg appends ({len(kept)} kept runs' partitions, {args.snapshots} "
        f"snapshots per run-partitioned table) in "
        f"{time.monotonic() - t0:.1f} s",
        flush=True,
    )
    n = args.segments if kind == "file" else args.s3_segments
    store = Storage.at(dep.landing).child(CONSUMER)
    newest = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    t0 = time.monotonic()
    backing = args.s3_backing if kind == "s3" else None
    seeded, _ = seed_history(store, n, newest, budget_s=1800, backing=backing)
    print(
        f"   {seeded:,} consumed landing segments in {time.monotonic() - t0:.1f} s ({load()})",
        flush=True,
    )


def bench_storage(base: Path, root: str, kind: str, args: argparse.Namespace) -> None:
    print(f"== {kind}: {root} ({load()})", flush=True)
    below = args.segments if kind == "file" else args.s3_segments
    deps = {name: Deployment(base / kind, root, name, below) for name in ("fresh", "year")}
    try:
        for dep in deps.values():
            dep.add(args.initial)
            print(f"   {dep.name}: first run {dep.run(args.keep):.1f} s ({load()})", flush=True)
        seed_year(deps["year"], args, kind)
        times: dict[str, list[float]] = {"year": [], "fresh": []}
        for i in range(args.repeats):
            for name, dep in deps.items():
                dep.add(args.new)
                times[name].append(dep.run(args.keep))
                print(
                    f"   {name} #{i + 1}: {times[name][-1]:.1f} s ({dep.last_steps}; {load()})",
                    flush=True,
                )
        y, f = statistics.median(times["year"]), statistics.median(times["fresh"])
        print(
            f"{kind}: one pipeline run of {args.new} new records beside a year: {y:.1f} s; on a "
            f"fresh deployment: {f:.1f} s (medians of {args.repeats}); ratio {y / f:.2f}x "
            f"(target <= 1.1); {load()}",
            flush=True,
        )
        year = deps["year"]
        print(f"   year's rows after: {counts(year.pg.url)}", flush=True)
    finally:
        for dep in deps.values():
            dep.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=35_040, help="seeded runs (a year: 35,040)")
    parser.add_argument("--keep", type=int, default=lifecycle.KEEP_RUNS)
    parser.add_argument("--segments", type=int, default=1_000_000, help="history on file")
    parser.add_argument("--s3-segments", type=int, default=100_000, help="history on S3")
    parser.add_argument(
        "--snapshots", type=int, default=96, help="seeded snapshots per run table (kept: 96)"
    )
    parser.add_argument("--initial", type=int, default=20_000, help="records before the seed")
    parser.add_argument("--new", type=int, default=2_000, help="new records per timed run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--storages", default="file,s3")
    args = parser.parse_args(argv)
    args.s3_backing = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-year-"))
    base.chmod(0o755)  # the embedded server runs as the postgres user
    print(f"bench/year.py: {load()}", flush=True)
    store = None
    try:
        for kind in [s for s in args.storages.split(",") if s]:
            (base / kind).mkdir()
            (base / kind).chmod(0o755)
            root = str(base / kind)
            if kind == "s3":
                from watch_service.tools.objectstore import ObjectStore

                store = ObjectStore(base / "s3-server").start(buckets=("bench",))
                args.s3_backing = store.root / "data"
                os.environ.update(store.config.environ())
                root = "s3://bench/year"
            bench_storage(base, root, kind, args)
    finally:
        if store is not None:
            store.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
