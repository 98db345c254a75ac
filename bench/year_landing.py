"""compact beside a year of landing history: the landing half of a year, simulated.

Starts its own throwaway PostgreSQL (the embedded cluster, a temp folder, a free loopback
port), one local Spark session and, for ``s3``, the tests' S3 server (S3Proxy, loopback). Per
storage it builds two landing zones for one consumer whose compact state (an Iceberg snapshot
summary, as compact leaves it) says every frame up to N is consumed:

* **year**: N consumed segments already on the landing, 7,200 an hour (a 500 ms flush) in
  ``<day>/<hour>/`` folders ending at the state's folder. Local: one tiny valid segment per
  folder and hard links to it (directory entries, no data); S3: one PUT each, 16 at a time;
* **fresh**: the same state, no history.

Then, ``--repeats`` times on each (interleaved, so both see the same machine load), it lands
``--new`` segments after the state and times compact alone (``spark_jobs.steps.compact.main.run``,
in-process). Prints the medians, their ratio (target <= 1.1) and the load average, and what
one listing of the whole history (the listing compact made before the dated layout) costs.
Not a test: it reports, it does not assert.
``python bench/year_landing.py [--segments 1000000] [--s3-segments 100000] [--new 200]
[--repeats 3] [--storages file,s3]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
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

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from spark_jobs.warehouse.layout import Layout  # noqa: E402
from watch_service.protocol import cursor as cursor_codec  # noqa: E402
from watch_service.protocol.landing import COLUMN_NAMES, FOOTER_KEY  # noqa: E402
from watch_service.protocol.landing_keys import folder_of, segment_key  # noqa: E402
from watch_service.sink.landing import SCHEMA  # noqa: E402
from watch_service.storage import Storage  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import free_port  # noqa: E402

CONSUMER = "bench"
TOPIC = "t"
PER_HOUR = 7_200  # segments an hour at the default 500 ms flush
FRAMES_PER_SEGMENT = 5
S3_THREADS = 16


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def segment_table(first: int, last: int) -> pa.Table:
    """Frames first..last, one record each (seq = frame number), with the sink's footer."""
    rows = []
    for f in range(first, last + 1):
        row = {
            "consumer": CONSUMER,
            "frame_no": f,
            "frame_id": cursor_codec.encode({TOPIC: f}),
            "received_ms": 1_700_000_000_000 + f,
            "kind": "record",
            "topic": TOPIC,
            "cursor": f,
            "seq": f,
            "ts": f,
            "data": json.dumps({"n": f}),
            "data_sha256": "0" * 64,
        }
        rows.append(tuple(row.get(c) for c in COLUMN_NAMES))
    cols = list(zip(*rows))
    table = pa.Table.from_arrays(
        [pa.array(c, type=fld.type) for c, fld in zip(cols, SCHEMA)], schema=SCHEMA
    )
    footer = {"first_frame_no": first, "last_frame_no": last, "last_frame_id": "", "cursors": {}}
    return table.replace_schema_metadata({FOOTER_KEY: json.dumps(footer)})


def history_folders(n: int, newest: dt.datetime) -> list[tuple[str, int, int]]:
    """(folder, first, last frame) of the hours holding frames 1..n, the last hour ``newest``."""
    hours = -(-n // PER_HOUR)
    out = []
    for h in range(hours):
        first = h * PER_HOUR + 1
        out.append(
            (
                folder_of(newest - dt.timedelta(hours=hours - 1 - h)),
                first,
                min(n, first + PER_HOUR - 1),
            )
        )
    return out


def seed_history(
    store: Storage, n: int, newest: dt.datetime, budget_s: float, backing: Path | None = None
) -> tuple[int, str]:
    """n consumed one-frame segments (fewer if ``budget_s`` runs out); (count, last folder).
    ``backing``: the S3 server's own folder (S3Proxy's filesystem backend, where an object is
    a file at ``bucket/key``): the history is seeded there as hard links, as on file, instead
    of one PUT each; every read of it still goes through the S3 API."""
    t0, done, last_folder = time.monotonic(), 0, ""
    template = segment_table(1, 1)
    sink = pa.BufferOutputStream()
    pq.write_table(template, sink)
    data = sink.getvalue().to_pybytes()
    pool = concurrent.futures.ThreadPoolExecutor(S3_THREADS)
    try:
        for folder, first, last in history_folders(n, newest):
            if time.monotonic() - t0 > budget_s:
                break
            names = [segment_key(folder, i, i) for i in range(first, last + 1)]
            if store.location.is_local or backing is not None:
                # one file per folder, the rest hard links to it (ext4 allows 65,000 a file)
                root = Path("/") if store.location.is_local else backing
                assert root is not None
                (root / store.path(folder)).mkdir(parents=True, exist_ok=True, mode=0o700)
                tmpl = root / store.path(names[0])
                tmpl.write_bytes(data)
                tmpl.chmod(0o600)  # as the server writes objects: not public-read
                for name in names[1:]:
                    os.link(tmpl, root / store.path(name))
            else:
                list(pool.map(lambda name: store.write_bytes(name, data), names))
            done, last_folder = last, folder
    finally:
        pool.shutdown()
    return done, last_folder


def seed_state(spark, url: str, layout: Layout, through: int, folder: str) -> None:
    """The warehouse as compact leaves it after consuming frames 1..through."""
    from spark_jobs.warehouse import tables
    from spark_jobs.warehouse.warehouse import Warehouse

    wh = Warehouse.attach(spark, layout, url)
    state = {
        "batch": 1,
        "run_id": "seed",
        "consumers": {
            CONSUMER: {
                "segment_through": through,
                "folder": folder,
                "frame_no": through,
                "frame_id": cursor_codec.encode({TOPIC: through}),
            }
        },
    }
    schema = tables.SCHEMAS["deliveries"][0]
    row = {"consumer": CONSUMER, "frame_no": through, "received_ms": 0, "kind": "record"}
    row |= {"topic": TOPIC, "seq": through, "batch": 1}
    df = spark.createDataFrame([tuple(row.get(f.name) for f in schema.fields)], schema)
    wh.append("deliveries", df, {tables.COMPACT_PROPERTY: json.dumps(state)})


class Zone:
    """One landing zone and warehouse whose consumer has consumed frames 1..through."""

    def __init__(self, spark, url: str, root: str, name: str, through: int, folder: str):
        self.landing, self.work, self.url = f"{root}/{name}/landing", f"{root}/{name}/wh", url
        self.next = through + 1
        self.store = Storage.at(self.landing).child(CONSUMER)
        seed_state(spark, url, Layout(self.landing, self.work, ""), through, folder)

    def compact(self, spark, new: int, run_id: str) -> float:
        """Land ``new`` segments in the current hour's folder, time compact alone."""
        from spark_jobs.steps.compact.main import run

        folder = folder_of(dt.datetime.now(dt.UTC))
        for _ in range(new):
            first, last = self.next, self.next + FRAMES_PER_SEGMENT - 1
            self.store.write_parquet(segment_key(folder, first, last), segment_table(first, last))
            self.next = last + 1
        args = Layout(self.landing, self.work, run_id).namespace("compact", self.url, 2)
        t0 = time.monotonic()
        figures = run(spark, args)
        seconds = time.monotonic() - t0
        assert figures["segments"] == new, figures
        return seconds


def bench_storage(spark, url: str, root: str, kind: str, n: int, new: int, repeats: int) -> None:
    newest = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    year_store = Storage.at(f"{root}/year/landing").child(CONSUMER)
    t0 = time.monotonic()
    seeded, folder = seed_history(year_store, n, newest, budget_s=900)
    print(
        f"== {kind}: {seeded:,} consumed segments seeded in {time.monotonic() - t0:.1f} s "
        f"({-(-seeded // PER_HOUR)} hour folders; {load()})",
        flush=True,
    )
    t0 = time.monotonic()
    try:
        listed = f"{len(year_store.files(recursive=True)):,} files"
    except OSError as exc:  # S3Proxy's file backend may stall on one page of a deep listing
        listed = f"failed ({str(exc)[:120]})"
    print(
        f"   one listing of the whole history (what compact did before the dated layout): "
        f"{listed} in {time.monotonic() - t0:.2f} s",
        flush=True,
    )
    year = Zone(spark, url, root, "year", seeded, folder)
    fresh = Zone(spark, url, root, "fresh", seeded, folder)
    fresh.compact(spark, new, f"{kind}-warm")  # the JVM's first compact pays its warm-up
    times: dict[str, list[float]] = {"year": [], "fresh": []}
    for i in range(repeats):
        for name, zone in (("fresh", fresh), ("year", year)):
            times[name].append(zone.compact(spark, new, f"{kind}-{name}-{i}"))
            print(f"   {name} #{i + 1}: {times[name][-1]:.2f} s ({load()})", flush=True)
    y, f = statistics.median(times["year"]), statistics.median(times["fresh"])
    print(
        f"{kind}: compact of {new} new segments beside {seeded:,} consumed: {y:.2f} s; on a fresh "
        f"landing: {f:.2f} s (medians of {repeats}); ratio {y / f:.2f}x (target <= 1.1); {load()}",
        flush=True,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=1_000_000, help="history on file")
    parser.add_argument("--s3-segments", type=int, default=100_000, help="history on S3")
    parser.add_argument("--new", type=int, default=200, help="new segments per compact")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--storages", default="file,s3")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-landing-"))
    base.chmod(0o755)  # the embedded server runs as the postgres user
    pg = EmbeddedPostgres(base / "pg", free_port())
    print(f"bench/year_landing.py: {load()}", flush=True)
    store = None
    spark = None
    try:
        pg.start()
        migrate(pg.url)
        from spark_jobs.common.session import build_session

        for kind in [s for s in args.storages.split(",") if s]:
            root, n = str(base / "file"), args.segments
            if kind == "s3":
                from watch_service.tools.objectstore import ObjectStore

                store = ObjectStore(base / "s3").start(buckets=("bench",))
                os.environ.update(store.config.environ())
                root, n = "s3://bench/year", args.s3_segments
            # a session per storage: s3a takes the store's settings when it starts
            spark = build_session(
                "bench-year-landing",
                master="local[2]",
                conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g"},
            )
            bench_storage(spark, pg.url, root, kind, n, args.new, args.repeats)
            spark.stop()
            spark = None
    finally:
        if spark is not None:
            spark.stop()
        if store is not None:
            store.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
