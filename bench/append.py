"""Append throughput: records/s through the HTTP API against raw ``COPY`` into the same server.

Starts its own throwaway PostgreSQL (the project's embedded cluster code, a temp folder, a free
loopback port) and ``auditsync serve --workers W`` (default: one per core) as a separate process,
then measures, each as the median of several repeats on a fresh topic:

* HTTP, single-record requests, from CLIENTS concurrent clients (one connection each);
* HTTP, 100-record batches, from CLIENTS concurrent clients, to one topic (the target figure),
  then spread over CLIENTS topics, then against a twin service with synchronous_commit=off
  (each service runs only for its own stages, alone);
* the floors, in the same run against the same server: psycopg ``COPY`` of the same rows into a
  scratch table shaped like ``records``, and single-row autocommit ``INSERT``s from one
  connection (what one writer without the service gets).

Prints the load average, the figures, the CPU each part (service workers, PostgreSQL, this
client) spent per record, the fdatasync latency of the disk (a topic's appends commit one after
another, so it bounds one topic), the ratios to the floors, and whether the targets are met:
batched >= 150,000 records/s and >= 35 % of COPY; CLIENTS single-record writers >= 8,000
records/s and not below single-row autocommit. Bounded to TIME_LIMIT_S; stops what it started by
PID. Not a test: it reports, it does not assert.
``python bench/append.py [--repeats N] [--quick] [--workers W]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import orjson  # noqa: E402
import psycopg  # noqa: E402
import uvloop  # noqa: E402
from _http import RawClient  # noqa: E402 (bench/)
from _proc import tree_cpu_s  # noqa: E402 (bench/)

from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import ServiceProcess, free_port  # noqa: E402

CLIENTS = 8
BATCH = 100
TARGET_RPS = 150_000
TARGET_COPY_SHARE = 0.35
TARGET_SINGLE_RPS = 8_000
TIME_LIMIT_S = 170


def record(i: int) -> dict:
    """A typical audit record: ~120 bytes of data plus a little meta."""
    return {
        "data": {
            "actor": f"user-{i % 97}",
            "action": "update",
            "object": f"doc-{i}",
            "fields": ["title", "body"],
            "n": i,
        },
        "meta": {"ip": "10.0.0.1"},
        "tag": "update",
        "node": f"node-{i % 4}",
    }


class CpuMeter:
    """CPU seconds used by the service process, the PostgreSQL server (postmaster and its live
    children) and this process: where the time goes, robust to a busy machine."""

    def __init__(self, postmaster_pid: int) -> None:
        self.postmaster_pid = postmaster_pid
        self.service_pid = 0  # the service the current stage drives (0: none runs)

    def sample(self) -> tuple[float, float, float]:
        """CPU seconds so far of (the service and its workers, PostgreSQL, this process)."""
        svc = tree_cpu_s(self.service_pid) if self.service_pid else 0.0
        pg = tree_cpu_s(self.postmaster_pid)
        own = os.times()
        return svc, pg, own.user + own.system


class Bench:
    def __init__(
        self,
        start_service: Callable[[str], ServiceProcess],
        db_url: str,
        repeats: int,
        scale: float,
        cpu: CpuMeter,
    ) -> None:
        self.start_service, self.db_url, self.repeats, self.cpu = (
            start_service,
            db_url,
            repeats,
            cpu,
        )
        self.url = ""
        self.cpu_per_record: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self.single_requests = int(4000 * scale)  # per repeat, across all clients
        self.batched_records = int(150_000 * scale)
        self.copy_rows = int(200_000 * scale)
        self.autocommit_rows = int(3000 * scale)
        self.topic_no = 0

    async def new_topic(self, session: aiohttp.ClientSession) -> str:
        self.topic_no += 1
        name = f"bench-{os.getpid()}-{self.topic_no}"
        async with session.put(f"{self.url}/v0/topics/{name}", json={}) as r:
            assert r.status == 201, await r.text()
        return name

    @contextlib.contextmanager
    def service(self, synchronous_commit: str) -> Iterator[None]:
        """The service runs for the stages that drive it, alone: an idle twin would hold
        connections and memory the measured one's PostgreSQL shares."""
        service = self.start_service(synchronous_commit)
        self.url, self.cpu.service_pid = service.url, service.pid
        try:
            yield
        finally:
            self.url, self.cpu.service_pid = "", 0
            service.stop()

    async def http_append(self, per_request: int, total_records: int, topics: int = 1) -> float:
        """records/s with CLIENTS clients, each on its own kept-alive connection, posting
        pre-encoded requests to one topic (or spread over ``topics`` topics)."""
        requests_per_client = max(1, total_records // per_request // CLIENTS)
        bodies = [
            orjson.dumps({"records": [record(i * per_request + j) for j in range(per_request)]})
            for i in range(64)
        ]
        async with aiohttp.ClientSession() as session:
            names = [await self.new_topic(session) for _ in range(topics)]
            # connected before the clock starts
            clients = [await RawClient.open(self.url) for _ in range(CLIENTS)]
            try:
                requests = [
                    [c.post_request(f"/v0/topics/{names[i % topics]}/records", b) for b in bodies]
                    for i, c in enumerate(clients)
                ]

                async def client(c: int) -> None:
                    for k in range(requests_per_client):
                        await clients[c].call(requests[c][(c + k) % len(bodies)])

                cpu_before = self.cpu.sample()
                started = time.perf_counter()
                await asyncio.gather(*(client(c) for c in range(CLIENTS)))
                elapsed = time.perf_counter() - started
                self.note_cpu(cpu_before, requests_per_client * CLIENTS * per_request)
            finally:
                for c in clients:
                    c.close()
            head = 0
            for name in names:
                async with session.get(f"{self.url}/v0/topics/{name}") as r:
                    head += (await r.json())["head_seq"]
        expected = requests_per_client * CLIENTS * per_request
        if head != expected:
            raise RuntimeError(f"{names}: {head} records appended, expected {expected}")
        return expected / elapsed

    async def copy(self, rows: int) -> float:
        """rows/s of one COPY (one transaction) into a fresh table shaped like ``records``."""
        table = f"bench_copy_{self.topic_no}"
        self.topic_no += 1
        encoded = [
            (
                orjson.dumps(r["data"]).decode(),
                orjson.dumps(r["meta"]).decode(),
                r["tag"],
                r["node"],
            )
            for r in map(record, range(1024))
        ]
        ts = time.time_ns() // 1_000_000
        async with await psycopg.AsyncConnection.connect(self.db_url, autocommit=True) as conn:
            await conn.execute(f"CREATE TABLE {table} (LIKE records INCLUDING ALL)")
            try:
                cpu_before = self.cpu.sample()
                started = time.perf_counter()
                async with (
                    conn.transaction(),
                    conn.cursor() as cur,
                    cur.copy(
                        f"COPY {table} (topic, seq, ts, tag, node, meta, data) FROM STDIN"
                    ) as cp,
                ):
                    for seq in range(1, rows + 1):
                        data, meta, tag, node = encoded[seq % 1024]
                        await cp.write_row(("bench-copy", seq, ts, tag, node, meta, data))
                elapsed = time.perf_counter() - started
                self.note_cpu(cpu_before, rows)
            finally:
                await conn.execute(f"DROP TABLE {table}")
        return rows / elapsed

    async def autocommit(self, rows: int) -> float:
        """rows/s of single-row ``INSERT``s, each its own autocommit transaction, from one
        connection into a fresh table shaped like ``records``: PostgreSQL's one-writer floor."""
        table = f"bench_single_{self.topic_no}"
        self.topic_no += 1
        data = orjson.dumps(record(0)["data"]).decode()
        ts = time.time_ns() // 1_000_000
        async with await psycopg.AsyncConnection.connect(self.db_url, autocommit=True) as conn:
            await conn.execute(f"CREATE TABLE {table} (LIKE records INCLUDING ALL)")
            try:
                insert = (
                    f"INSERT INTO {table} (topic, seq, ts, tag, node, meta, data) "
                    "VALUES ('bench-single', %s, %s, 'update', 'node-0', NULL, %s)"
                )
                cpu_before = self.cpu.sample()
                started = time.perf_counter()
                for seq in range(1, rows + 1):
                    await conn.execute(insert, (seq, ts, data), prepare=True)
                elapsed = time.perf_counter() - started
                self.note_cpu(cpu_before, rows)
            finally:
                await conn.execute(f"DROP TABLE {table}")
        return rows / elapsed

    def note_cpu(self, before: tuple[float, float, float], records: int) -> None:
        after = self.cpu.sample()
        svc, pg, own = ((a - b) / records * 1e6 for a, b in zip(after, before, strict=True))
        self.cpu_per_record = (svc, pg, own)

    async def measure(self, name: str, fn: Callable[[], Awaitable[float]]) -> float:
        await fn()  # warm-up: connections, plans, caches
        runs, cpu = [], []
        for _ in range(self.repeats):
            runs.append(await fn())
            cpu.append(self.cpu_per_record)
        median = statistics.median(runs)
        spread = ", ".join(f"{r:,.0f}" for r in runs)
        service, pg, own = (statistics.median(c[i] for c in cpu) for i in range(3))
        print(
            f"  {name:<34} {median:>10,.0f} records/s   (runs: {spread})\n"
            f"  {'':<34} CPU per record: service {service:.1f} us, PostgreSQL {pg:.1f} us, "
            f"bench {own:.1f} us",
            flush=True,
        )
        return median

    async def run(self) -> dict[str, float]:
        results = {}
        with self.service("on"):
            results["single"] = await self.measure(
                f"HTTP single-record x{CLIENTS} clients",
                lambda: self.http_append(1, self.single_requests),
            )
            results["batched"] = await self.measure(
                f"HTTP {BATCH}-record batches x{CLIENTS} clients",
                lambda: self.http_append(BATCH, self.batched_records),
            )
            # the same over CLIENTS topics: how much the per-topic head lock (L1) costs
            results["batched_spread"] = await self.measure(
                f"  same, over {CLIENTS} topics",
                lambda: self.http_append(BATCH, self.batched_records, topics=CLIENTS),
            )
        with self.service("off"):
            results["batched_async"] = await self.measure(
                "  same, synchronous_commit=off",
                lambda: self.http_append(BATCH, self.batched_records),
            )
        results["copy"] = await self.measure(
            "floor: psycopg COPY (one connection)", lambda: self.copy(self.copy_rows)
        )
        results["autocommit"] = await self.measure(
            "floor: single-row autocommit INSERT",
            lambda: self.autocommit(self.autocommit_rows),
        )
        return results


def report(results: dict[str, float]) -> bool:
    copy, autocommit = results["copy"], results["autocommit"]
    print(
        f"  ratio to COPY: single {results['single'] / copy:.1%}, "
        f"batched {results['batched'] / copy:.1%}, "
        f"batched over {CLIENTS} topics {results['batched_spread'] / copy:.1%}, "
        f"batched with synchronous_commit=off {results['batched_async'] / copy:.1%}\n"
        f"  {CLIENTS} single-record writers / one connection's single-row autocommit: "
        f"{results['single'] / autocommit:.2f} x"
    )
    batched = results["batched"] >= TARGET_RPS and results["batched"] >= TARGET_COPY_SHARE * copy
    single = results["single"] >= TARGET_SINGLE_RPS and results["single"] >= autocommit
    print(
        f"  target (batched >= {TARGET_RPS:,}/s and >= {TARGET_COPY_SHARE:.0%} of COPY): "
        f"{'met' if batched else 'NOT met'}\n"
        f"  target ({CLIENTS} single-record writers >= {TARGET_SINGLE_RPS:,}/s and >= "
        f"single-row autocommit): {'met' if single else 'NOT met'}"
    )
    return batched and single


def fsync_latency_ms(folder: Path, rounds: int = 50) -> float:
    """Median fdatasync of an 8 KiB write: what every synchronous commit waits for."""
    path = folder / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for _ in range(rounds):
            os.write(fd, b"\0" * 8192)
            started = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1000


def _out_of_time(signum, frame) -> None:
    raise TimeoutError(f"append benchmark: over its {TIME_LIMIT_S} s bound")


def _terminated(signum, frame) -> None:
    raise SystemExit(143)  # unwinds through main's finally: the servers are stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tenth of the work (smoke run)")
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count(), help="service workers (default: cores)"
    )
    args = parser.parse_args(argv)

    signal.signal(signal.SIGALRM, _out_of_time)
    signal.signal(signal.SIGTERM, _terminated)
    signal.alarm(TIME_LIMIT_S)
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-append-"))
    base.chmod(0o755)  # as root the server runs as "postgres", which must reach the folder
    cluster = EmbeddedPostgres(base / "pg", free_port())
    services: list[ServiceProcess] = []
    began = time.monotonic()
    try:
        url = cluster.start()
        migrate(url)

        def start_service(commit: str) -> ServiceProcess:
            log_path = base / f"service-{commit}.log"
            service = ServiceProcess(
                url,
                log_path=log_path,
                workers=args.workers,
                env={
                    "AUDITSYNC_RETENTION_INTERVAL_S": "3600",
                    "AUDITSYNC_SYNCHRONOUS_COMMIT": commit,
                },
            )
            services.append(service)
            return service.start(timeout=60)  # with every worker listening

        print(
            f"append benchmark: PostgreSQL :{cluster.port}; the service (then its "
            f"synchronous_commit=off twin) with {args.workers} worker(s), {os.cpu_count()} CPUs"
        )
        print("  load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        fsync_ms = fsync_latency_ms(base)
        print(
            f"  fdatasync in the data folder: p50 {fsync_ms:.2f} ms. One topic's appends commit "
            f"one after another (L1), so a topic tops out near {BATCH} records / "
            f"(fsync + statement) = {BATCH / (fsync_ms + 0.7) * 1000:,.0f}/s here"
        )
        postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
        bench = Bench(
            start_service, url, args.repeats, 0.1 if args.quick else 1.0, CpuMeter(postmaster)
        )
        results = uvloop.run(bench.run())
        report(results)
        print("  load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        print(f"  ({time.monotonic() - began:.1f} s in all)")
        return 0
    finally:
        signal.alarm(0)
        for service in services:
            service.stop()
        cluster.destroy()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
