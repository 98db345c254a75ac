"""Benchmark of what retention costs while nothing is due. Not a test: it prints.

One run, loopback only, bounded (~2 min), everything it starts stopped by PID: its own
embedded PostgreSQL (destroyed at the end) holding TOPICS retained topics, 80 % capped
(``max_records`` 10, one record each) and 20 % with a ttl of a day (one fresh record each), so
no pass has anything to trim; then ``auditsync serve --workers 2`` twice, with the retention
pass every 5 s (the default) and with it off (every 10^6 s). Figures: PostgreSQL's committed
transactions per second over MEASURE_S (``pg_stat_database.xact_commit``), both runs, and their
difference, which is what retention costs idle; and the time of one pass with nothing due.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPICS = int(os.environ.get("BENCH_TOPICS", "10000"))
WORKERS = 2
MEASURE_S = 20.0
SETTLE_S = 6.0  # past the first pass after start


def commits(db_url: str) -> int:
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("SELECT pg_stat_force_next_flush()")
        row = c.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def seed(db_url: str) -> None:
    import psycopg

    capped = TOPICS * 8 // 10
    now_ms = time.time_ns() // 1_000_000
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO topics (name, head_seq, earliest_seq, last_ts, max_records, ttl_ms) "
            "SELECT 'ret-' || g, 1, 1, %s, CASE WHEN g <= %s THEN 10 END, "
            "CASE WHEN g > %s THEN 86400000 END FROM generate_series(1, %s) g",
            (now_ms, capped, capped, TOPICS),
        )
        c.execute(
            "INSERT INTO records (topic, seq, ts, data) "
            "SELECT 'ret-' || g, 1, %s, '{}' FROM generate_series(1, %s) g",
            (now_ms, TOPICS),
        )


def pass_ms(db_url: str) -> float:
    """Milliseconds of one pass with nothing due (``retention_pass``: the one ``DUE`` read),
    the best of three."""
    import asyncio

    import psycopg

    from watch_service.store.retention import retention_pass

    async def run() -> float:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                assert await retention_pass(conn) == []
                best = min(best, time.perf_counter() - t0)
            return best * 1000

    return asyncio.run(run())


def measure(db_url: str, base: Path, interval_s: float) -> float:
    """Commits/s with ``serve --workers 2`` up and retention every ``interval_s``."""
    from watch_service.tools.local import ServiceProcess

    env = {"AUDITSYNC_RETENTION_INTERVAL_S": str(interval_s), "AUDITSYNC_KEYS_FILE": None}
    log_path = base / f"serve-{interval_s:g}.log"
    svc = ServiceProcess(db_url, env=env, log_path=log_path, workers=WORKERS).start(timeout=60)
    try:
        time.sleep(SETTLE_S)  # bench pacing: past the first pass after start
        c0, t0 = commits(db_url), time.monotonic()
        time.sleep(MEASURE_S)  # the measured window
        c1, t1 = commits(db_url), time.monotonic()
    finally:
        svc.stop()
    return (c1 - c0 - 1) / (t1 - t0)  # less the first reading's own commit


def main() -> None:
    from watch_service.store.cluster import EmbeddedPostgres
    from watch_service.store.migrate import migrate
    from watch_service.tools.local import free_port

    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-"))
    base.chmod(0o755)  # the cluster runs as postgres
    pg = EmbeddedPostgres(base / "pg", free_port())
    try:
        db_url = pg.start()
        migrate(db_url)
        seed(db_url)
        print(
            f"{TOPICS} retained topics, nothing due; serve --workers {WORKERS}; "
            f"loadavg {Path('/proc/loadavg').read_text().strip()}"
        )
        print(f"one pass with nothing due: {pass_ms(db_url):.1f} ms")
        on = measure(db_url, base, 5.0)
        off = measure(db_url, base, 1e6)
        print(
            f"commits/s: retention every 5 s {on:.1f}, retention off {off:.1f}, "
            f"retention's share {on - off:.1f}"
        )
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
