"""Maintenance over many real pipeline runs: files and snapshots per warehouse table stay
bounded, and a run's time does not grow.

Starts its own throwaway PostgreSQL (the project's embedded cluster, a temp folder, a free
loopback port) and one local Spark session (``local[2]``), then makes ``--runs`` (default 200,
at most 1,000) real small pipeline runs. Each run lands ``--records`` (default 40) new records
over 4 topics the way ``bench/pipeline.py``'s ``World`` does (the source rows in PostgreSQL,
the sink's segment files in the landing zone), then runs ``spark_jobs.runner.execute`` in-process,
i.e. ``auditsync pipeline run``: compact, reconcile, backfill, verify through
``runner.run_steps``, then the removal of the per-run rows of runs older than the newest 96. So
every warehouse table a run writes gets that run's commits, as in production. A run whose
quality gate fails stops the bench.

Every ``--maintain-every`` N runs (default 50) the real maintenance step runs
(``spark_jobs.steps.maintenance.main.run``: rewrite, expire, remove orphans, with the production
expiry rule of ``spark_jobs.warehouse.maintenance``). The maintenance DAG is daily and a day of
15-minute runs is 96 runs. N = 50 is about half a day: 200 runs give four passes, so the state
between passes is seen four times, not twice. The bound below takes N as a parameter, and
production's is the same with N = 96. The retention is counted in runs because the bench
compresses days into minutes. Before each pass, the retention in hours is set to the age of the
``--retention-runs``-th newest run (default 96: a day of runs), so the snapshots of that many
runs stay readable "as run X left it", and nothing older does. Production keeps 7 days, which is
672 runs.

**The bound.** For every warehouse table, ``files <= f x N + L``, where ``f`` is the most data
files one run added to that table (read from the runs' snapshot summaries, ``auditsync.run-id``)
and ``L`` is what the previous pass left (0 before the first pass). Here f is 8 for the audit
log (each of ``local[2]``'s two write tasks writes each of the 4 topic-day partitions: writes
are not shuffled), 2 for deliveries, 1 for detail and summary, and 0 for ledger and remaining
(no late copies, no defects). For the tables maintenance compacts (audit_log, deliveries), L is
one file per partition (4 topic-days and 1 consumer here). For the per-run tables (detail,
summary, ledger, remaining), each run is its own partition, so L is the files of the kept runs,
at most 96 runs' worth. Files only grow between passes through runs (the retention of old runs
only removes files), so the highest counts are the ones just before a pass. The bench checks
the bound there and at the end, prints OK or EXCEEDED per table, and exits 1 when any table
exceeds it. Everything else it reports without asserting.

Prints, per pass and at the end: data files per table (and the most in one partition),
snapshots per table, the pass's seconds, and a one-topic pyiceberg read of the audit log just
before and after the pass. For the pipeline run time it prints the median of the first 10 runs
against the median of the last 10, the median per 50-run block (with that block's mean 1-minute
load), and the load average at the start and at the end. Pass times are not part of run times.
Spark runs with 2 shuffle partitions (``local[2]``, 40 records a run). Loopback only. It stops
its own PostgreSQL and Spark, also on SIGTERM.

Measured here (``--runs 200``, load 2.3-10, 2026-11-26): the bound held before all four passes
(the audit log at 400-404 of a bound of 400-404, deliveries at 92-97 of 100-101); each pass
took the data files of all tables from 597-692 back to 105-197 in 15-22 s; a run's CPU, median
per 50-run block, went 11.0, 8.4, 8.0, 7.1 s and its wall time 27.6, 9.5, 9.3, 8.6 s (the first
block beside the test suite). Before ``common/step_cache``, a run's CPU grew from 24 s to
56-62 s within 29 runs (docs/benchmarks.md).

``python bench/iceberg_maintenance.py [--runs 200] [--maintain-every 50] [--records 40]
[--retention-runs 96] [--quick]`` (``--quick``: 4 runs, a pass every 2, 2-3 minutes).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from _proc import tree_cpu_s  # noqa: E402 (bench/)
from pipeline import World, load  # noqa: E402 (bench/)

from spark_jobs import lifecycle, runner  # noqa: E402
from spark_jobs.common.session import build_session, stop_session  # noqa: E402
from spark_jobs.steps.maintenance import main as maintenance  # noqa: E402
from spark_jobs.warehouse import readers, tables  # noqa: E402
from spark_jobs.warehouse.layout import TABLES, Layout  # noqa: E402
from spark_jobs.warehouse.warehouse import Warehouse  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import free_port  # noqa: E402

MAX_RUNS = 1000
WINDOW = 10  # runs in the "first" and "last" medians
BLOCK = 50  # runs per block median
# The age, in hours, of the retention-runs-th newest run (all runs when there are fewer), plus a
# second so that the run itself is within the retention.
RETENTION_HOURS = """
SELECT extract(epoch FROM now() - min(started_at)) / 3600 + 1.0 / 3600
  FROM (SELECT started_at FROM pipeline_runs ORDER BY started_at DESC LIMIT %s) AS newest
"""


def census(spark, layout: Layout, url: str) -> dict[str, dict[str, int]]:
    """Per table with a snapshot: data files, the most in one partition, snapshots, and the
    most data files one run's commits added (``per_run``)."""
    out = {}
    wh = Warehouse.open(layout, url, spark=spark)
    for name in TABLES:
        if wh.snapshot(name) is None:
            continue
        table = layout.table(name)
        files = spark.sql(
            f"SELECT coalesce(sum(file_count), 0), coalesce(max(file_count), 0) "
            f"FROM {table}.partitions"
        ).first()
        snaps = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()
        per_run = spark.sql(
            f"SELECT coalesce(max(n), 0) FROM (SELECT sum(CAST(summary['added-data-files'] AS "
            f"INT)) AS n FROM {table}.snapshots WHERE summary['{tables.RUN_PROPERTY}'] IS NOT "
            f"NULL GROUP BY summary['{tables.RUN_PROPERTY}'])"
        ).first()
        out[name] = {
            "files": int(files[0]) if files else 0,
            "most": int(files[1]) if files else 0,
            "snapshots": int(snaps[0]) if snaps else 0,
            "per_run": int(per_run[0]) if per_run else 0,
        }
    return out


def show(title: str, counts: dict[str, dict[str, int]]) -> None:
    print(f"[bench] {title}", flush=True)
    for name, c in counts.items():
        print(
            f"[bench]   {name:<10} data files {c['files']:>4} (most in a partition "
            f"{c['most']:>3})  snapshots {c['snapshots']:>4}  one run adds <= {c['per_run']}",
            flush=True,
        )


def check_bound(
    counts: dict[str, dict[str, int]], f: dict[str, int], n: int, left: dict[str, int]
) -> bool:
    """Prints ``files <= f x N + L`` per table, OK or EXCEEDED; True when every table holds."""
    held = True
    for name, c in counts.items():
        bound = f.get(name, 0) * n + left.get(name, 0)
        ok = c["files"] <= bound
        held &= ok
        print(
            f"[bench]   bound {name:<10} {c['files']:>4} <= {f.get(name, 0)} x {n} + "
            f"{left.get(name, 0)} = {bound:>4}  {'OK' if ok else 'EXCEEDED'}",
            flush=True,
        )
    return held


def read_s(layout: Layout, url: str, topic: str) -> float:
    started = time.monotonic()
    readers.audit_log(layout, url, topic)
    return time.monotonic() - started


def maintain(spark, layout: Layout, url: str, retention_runs: int, topic: str) -> str:
    """One maintenance pass with the retention of the newest ``retention_runs`` runs; its line."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(RETENTION_HOURS, (retention_runs,)).fetchone()
    hours = float(row[0]) if row and row[0] is not None else 0.0
    read_before = read_s(layout, url, topic)
    args = maintenance.build_parser().parse_args(
        ["--work", layout.work, "--database-url", url, "--snapshot-retention-hours", f"{hours}"]
    )
    figures = maintenance.run(spark, args)
    read_after = read_s(layout, url, topic)
    line = (
        f"{figures['seconds']:.1f} s (retention {hours * 60:.1f} min), data files "
        f"{figures['files_before']} -> {figures['files_after']}, snapshots expired "
        f"{figures['snapshots_expired']}, orphans removed {figures['orphans_removed']}; "
        f"one-topic read {read_before:.3f} -> {read_after:.3f} s ({load()})"
    )
    print(f"[bench] maintenance pass: {line}", flush=True)
    return line


def one_run(spark, world: World, work: str, i: int) -> tuple[float, float]:
    """One pipeline run over what was landed: its wall seconds and the CPU seconds of this
    process and its JVM (PostgreSQL's are not counted)."""
    args = argparse.Namespace(
        action="run",
        landing=world.landing,
        work=work,
        run_id=f"run-{i:04d}",
        num_partitions=4,
        keep_runs=lifecycle.KEEP_RUNS,
    )
    started, cpu = time.monotonic(), tree_cpu_s(os.getpid())
    code = runner.execute(spark, args, world.url)
    seconds, cpu = time.monotonic() - started, tree_cpu_s(os.getpid()) - cpu
    if code != 0:
        raise SystemExit(f"[bench] run {i} exited {code}: the bench stops")
    return seconds, cpu


def summarize(seconds: list[float], cpus: list[float], loads: list[float]) -> None:
    """The run time, wall and CPU, of the first runs against the last ones and per block."""
    window = min(WINDOW, len(seconds) // 2) or 1
    for what, values in (("wall", seconds), ("CPU", cpus)):
        first, last = statistics.median(values[:window]), statistics.median(values[-window:])
        print(
            f"[bench] pipeline run {what}: median of the first {window} {first:.2f} s, of the "
            f"last {window} {last:.2f} s, ratio {last / first:.2f}x",
            flush=True,
        )
    for lo in range(0, len(seconds), BLOCK):
        block = slice(lo, lo + BLOCK)
        print(
            f"[bench]   runs {lo + 1:>4}-{lo + len(seconds[block]):<4} median wall "
            f"{statistics.median(seconds[block]):6.2f} s, CPU {statistics.median(cpus[block]):6.2f}"
            f" s  (mean 1-minute load {statistics.mean(loads[block]):.1f})",
            flush=True,
        )


def bench(spark, url: str, base: Path, args: argparse.Namespace) -> bool:
    world = World(url, str(base / "landing"), "maint")
    work = str(base / "warehouse")
    layout = Layout("", work, "")
    f: dict[str, int] = {}
    left: dict[str, int] = {}
    held = True
    seconds: list[float] = []
    cpus: list[float] = []
    loads: list[float] = []
    passes: list[str] = []
    for i in range(1, args.runs + 1):
        world.add(args.records)
        wall, cpu = one_run(spark, world, work, i)
        seconds.append(wall)
        cpus.append(cpu)
        loads.append(os.getloadavg()[0])
        print(f"[bench] run {i}: {wall:.2f} s, CPU {cpu:.2f} s ({load()})", flush=True)
        if i % args.maintain_every and i != args.runs:
            continue
        counts = census(spark, layout, url)
        for name, c in counts.items():
            f[name] = max(f.get(name, 0), c["per_run"])
        show(f"after run {i}, before maintenance:", counts)
        held &= check_bound(counts, f, args.maintain_every, left)
        if i % args.maintain_every == 0:
            line = maintain(spark, layout, url, args.retention_runs, world.topics[0])
            passes.append(f"after run {i}: {line}")
            after = census(spark, layout, url)
            left = {name: c["files"] for name, c in after.items()}
            show(f"after the maintenance pass at run {i}:", after)
    for line in passes:
        print(f"[bench] maintenance pass {line}", flush=True)
    summarize(seconds, cpus, loads)
    return held


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--maintain-every", type=int, default=50)
    parser.add_argument("--records", type=int, default=40, help="new records per run (4 topics)")
    parser.add_argument("--retention-runs", type=int, default=lifecycle.KEEP_RUNS)
    parser.add_argument("--quick", action="store_true", help="4 runs, a pass every 2")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.maintain_every = 4, 2
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be within 1..{MAX_RUNS}")
    if args.maintain_every < 1 or args.retention_runs < 1:
        parser.error("--maintain-every and --retention-runs must be at least 1")
    # SIGTERM (run_all's backstop, or an operator's kill) unwinds through the finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-maint-"))
    base.chmod(0o755)  # the embedded server runs as the postgres user
    cluster = EmbeddedPostgres(base / "pg", free_port())
    spark = None
    print(f"[bench] iceberg_maintenance: {args.runs} runs, a pass every {args.maintain_every} "
          f"({load()})", flush=True)  # fmt: skip
    try:
        cluster.start()
        migrate(cluster.url)
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only: read as the JVM starts
        spark = build_session(
            "bench-maintenance",
            master="local[2]",
            conf={
                "spark.ui.enabled": "false",
                "spark.driver.memory": "2g",
                "spark.sql.shuffle.partitions": "2",  # local[2] and 40 records a run
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            },
        )
        spark.sparkContext.setLogLevel("ERROR")
        held = bench(spark, cluster.url, base, args)
    finally:
        try:
            if spark is not None:
                stop_session(spark)
        finally:
            cluster.stop()
            shutil.rmtree(base, ignore_errors=True)
    print(f"[bench] bound {'held' if held else 'EXCEEDED'}; {load()}", flush=True)
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
