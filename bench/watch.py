"""Benchmark of the SSE watch (seed 002) against a bare relay floor. Not a test: it prints.

One run, loopback only, bounded (< 5 min), everything it starts stopped by PID:

* its own embedded PostgreSQL in a temp dir on a free port (destroyed at the end);
* the floor: a bare relay process (INSERT+NOTIFY in one transaction → one LISTEN → the same SSE
  bytes written to every client socket);
* the service: ``auditsync serve --workers W`` (default: one per core) as its own processes;
* watchers: raw-socket SSE clients in two processes (uvloop, ``asyncio.Protocol``), so the
  service's core is not shared with a client's event loop.

Latency is append → client receive: the producer puts ``{"t": time.time_ns()}`` in each record
just before sending it (same machine clock), the watcher subtracts at ``data_received``.
Figures: p50 / p99 / max per watcher count (medians of repeats), the ratio to the floor,
records lost, delivered records/s at saturation, and the service's RSS with 5,000 idle streams.
Beside each row's relaying CPU, the watcher processes' CPU per delivered record and
PostgreSQL's per appended record, measured alike in both halves: all share the two cores, so a
row whose clients or database take most of them says so.
"""

from __future__ import annotations

import array
import asyncio
import base64
import functools
import json
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _http import RawClient  # noqa: E402 (bench/)
from _proc import tree_cpu_s, tree_rss_mib, tree_wakeups  # noqa: E402 (bench/)

from watch_service.tools.local import ServiceProcess, free_port  # noqa: E402

RATE = {1: 500, 10: 500, 100: 500, 1000: 100, 10000: 10}  # rec/s per watcher count
REPEATS = {1: 3, 10: 3, 100: 3, 1000: 3, 10000: 1}
MEASURE_S = {1: 3, 10: 3, 100: 3, 1000: 4, 10000: 5}
CLIENT_PROCS = 2
WORKERS = os.cpu_count() or 1  # the service's workers: ``serve``'s default unless --workers
IDLE_STREAMS = 5000
JSON_OUT: Path | None = None  # --json: the figures, for bench/compare.py
EXTRAS = True  # saturation and idle streams after the rows (--rows-only: not)
TARGETS = (
    "100 watchers @500/s: p50 ≤ 2 ms, p99 ≤ 5 ms, ≤ 2× floor; 1000 @100/s: the full rate, "
    "p99 ≤ 50 ms, 0 lost; 10,000 @10/s: p99 ≤ 250 ms; 5,000 idle streams < 500 MiB RSS"
)
T_RE = re.compile(rb'"t":(\d+)')
SEQ_RE = re.compile(rb'"\$seq":(\d+)')
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))


# -- watcher processes -------------------------------------------------------------------------
class Watcher(asyncio.Protocol):
    """One SSE connection: raw HTTP/1.1 GET, frames counted and timed as bytes arrive."""

    def __init__(self, request: bytes, ready_marker: bytes, lat: array.array) -> None:
        self.request, self.marker, self.lat = request, ready_marker, lat
        self.buf = b""
        self.ready = asyncio.get_running_loop().create_future()
        self.count = 0
        self.gaps = 0
        self.last_seq: int | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        buf = self.buf + data
        end = buf.rfind(b"\n\n")
        if end < 0:
            self.buf = buf
            return
        block, self.buf = buf[: end + 2], buf[end + 2 :]
        if not self.ready.done() and self.marker in block:
            self.ready.set_result(True)
        for t in T_RE.findall(block):
            self.lat.append(now - int(t))
        for s in SEQ_RE.findall(block):
            seq = int(s)
            if self.last_seq is not None and seq != self.last_seq + 1:
                self.gaps += 1
            self.last_seq = seq
            self.count += 1

    def connection_lost(self, exc) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"closed before ready: {exc}"))


async def watcher_main(pipe) -> None:
    loop = asyncio.get_running_loop()
    watchers: list[Watcher] = []
    lat = array.array("q")
    while True:
        cmd, *args = await loop.run_in_executor(None, pipe.recv)
        if cmd == "connect":
            port, paths, marker = args
            for i in range(0, len(paths), 100):  # paced: the listen backlog is finite
                batch = []
                for path in paths[i : i + 100]:
                    req = (
                        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Accept: text/event-stream\r\n\r\n"
                    ).encode()
                    factory = functools.partial(Watcher, req, marker, lat)
                    _, w = await loop.create_connection(factory, "127.0.0.1", port)
                    batch.append(w)
                await asyncio.wait_for(asyncio.gather(*(w.ready for w in batch)), 60)
                watchers += batch
            pipe.send(("ready", len(watchers)))
        elif cmd == "reset":
            del lat[:]
            for w in watchers:
                w.count = w.gaps = 0
            pipe.send("ok")
        elif cmd == "counts":
            pipe.send([w.count for w in watchers])
        elif cmd == "report":
            pipe.send((lat.tobytes(), [w.count for w in watchers], sum(w.gaps for w in watchers)))
        elif cmd == "close":
            for w in watchers:
                if w.transport is not None:
                    w.transport.abort()
            watchers.clear()
            pipe.send("ok")
        elif cmd == "exit":
            return


def watcher_proc(pipe) -> None:
    import uvloop

    raise_nofile()
    uvloop.run(watcher_main(pipe))


class Watchers:
    """The watcher processes, driven over pipes."""

    def __init__(self, ctx) -> None:
        self.pipes: list = []
        self.procs: list = []
        for _ in range(CLIENT_PROCS):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=watcher_proc, args=(child,), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    async def ask(self, *cmd) -> list:
        for p in self.pipes:
            p.send(cmd)
        return [await asyncio.to_thread(p.recv) for p in self.pipes]

    async def connect(self, port: int, paths: list[str], marker: bytes) -> None:
        for i, p in enumerate(self.pipes):
            p.send(("connect", port, paths[i :: len(self.pipes)], marker))
        for p in self.pipes:
            reply = await asyncio.to_thread(p.recv)
            assert reply[0] == "ready", reply

    async def total(self) -> int:
        return sum(sum(c) for c in await self.ask("counts"))

    async def report(self) -> tuple[list[int], list[int], int]:
        lats: list[int] = []
        counts: list[int] = []
        gaps = 0
        for raw, c, g in await self.ask("report"):
            lats += array.array("q", raw)
            counts += c
            gaps += g
        return lats, counts, gaps

    def cpu_s(self) -> float:
        """The watcher processes' CPU-seconds so far."""
        return sum(tree_cpu_s(proc.pid) for proc in self.procs)

    def stop(self) -> None:
        for p in self.pipes:
            p.send(("exit",))
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)


# -- the floor: a bare relay -------------------------------------------------------------------
class RelayClient(asyncio.Protocol):
    def __init__(self, clients: list) -> None:
        self.clients = clients

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self not in self.clients:  # the request: answer like an SSE endpoint
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; "
                b"charset=utf-8\r\nCache-Control: no-store\r\n\r\nretry: 2000\n\n"
            )
            self.clients.append(self)

    def connection_lost(self, exc) -> None:
        if self in self.clients:
            self.clients.remove(self)


async def relay_main(db_url: str, port: int) -> None:
    """LISTEN, turn each notification into the SSE frame the service would send, and write
    whatever is pending to every client once per loop turn (coalesced, like a good relay)."""
    import psycopg

    clients: list[RelayClient] = []
    pending: list[bytes] = []
    loop = asyncio.get_running_loop()

    def flush() -> None:
        data = b"".join(pending)
        pending.clear()
        for client in clients:
            client.transport.write(data)

    await loop.create_server(lambda: RelayClient(clients), "127.0.0.1", port, backlog=4096)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("LISTEN bench")
        seq = 0
        async for note in conn.notifies():
            seq += 1
            ts, data = note.payload.split(" ", 1)
            frame_id = base64.urlsafe_b64encode(f'{{"floor":{seq}}}'.encode()).rstrip(b"=")
            if not pending:
                loop.call_soon(flush)
            pending.append(
                b"id: "
                + frame_id
                + b'\nevent: record\ndata: {"topic":"floor","records":[{"$seq":'
                + b"%d" % seq
                + b',"$ts":'
                + ts.encode()
                + b',"data":'
                + data.encode()
                + b'}],"from_seq":%d,"to_seq":%d,"head_seq":%d}\n\n' % (seq - 1, seq, seq)
            )


def relay_proc(db_url: str, port: int) -> None:
    import uvloop

    raise_nofile()
    uvloop.run(relay_main(db_url, port))


# -- producers ---------------------------------------------------------------------------------
async def produce(send, rate: int, seconds: float, inflight: int = 8) -> int:
    """Call ``send(i)`` at a steady ``rate`` for ``seconds`` (absolute schedule, bounded
    concurrency); returns how many were sent."""
    n = int(rate * seconds)
    gate = asyncio.Semaphore(inflight)
    tasks = []
    start = time.monotonic()

    async def one(i: int) -> None:
        async with gate:
            await send(i)

    try:
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return n


class Producer:
    """A few kept-alive connections, one single-record append each at a time: the floor's and
    the service's producers share the shape, so each side's client costs about the same.
    Subclasses say how a connection opens, closes and appends."""

    def __init__(self, connections: int = 8) -> None:
        self.n = connections

    async def open(self) -> Any:
        raise NotImplementedError

    async def close(self, conn: Any) -> None:
        raise NotImplementedError

    async def append(self, conn: Any, t: int) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Producer:
        self.free: asyncio.Queue = asyncio.Queue()
        for _ in range(self.n):
            self.free.put_nowait(await self.open())
        return self

    async def __aexit__(self, *exc) -> None:
        while not self.free.empty():
            await self.close(self.free.get_nowait())

    async def send(self, i: int) -> None:
        conn = await self.free.get()
        try:
            await self.append(conn, time.time_ns())
        finally:
            self.free.put_nowait(conn)


class FloorProducer(Producer):
    """INSERT + NOTIFY in one statement (one transaction); the relay numbers frames in NOTIFY
    order, which is commit order."""

    def __init__(self, db_url: str, connections: int = 8) -> None:
        super().__init__(connections)
        self.db_url = db_url

    async def open(self) -> Any:
        import psycopg

        return await psycopg.AsyncConnection.connect(self.db_url, autocommit=True)

    async def close(self, conn: Any) -> None:
        await conn.close()

    async def append(self, conn: Any, t: int) -> None:
        data = json.dumps({"t": t}, separators=(",", ":"))
        await conn.execute(
            "WITH i AS (INSERT INTO bench_floor (data) VALUES (%s::json) RETURNING id) "
            "SELECT pg_notify('bench', %s) FROM i",
            (data, f"{t // 1_000_000} {data}"),
        )


class ServiceProducer(Producer):
    """The service's append route over raw HTTP/1.1 (``_http.RawClient``): a full HTTP
    client's CPU is several times the floor's psycopg, and it would take the cores the service
    and PostgreSQL share. ``rtts`` gets each POST's round trip."""

    def __init__(self, url: str, topic: str, rtts: list[int], connections: int = 8) -> None:
        super().__init__(connections)
        self.url, self.path, self.rtts = url, f"/v0/topics/{topic}/records", rtts

    async def open(self) -> Any:
        return await RawClient.open(self.url)

    async def close(self, conn: Any) -> None:
        conn.close()

    async def append(self, conn: Any, t: int) -> None:
        body = b'{"records":[{"data":{"t":%d}}]}' % t
        await conn.call(conn.post_request(self.path, body))
        self.rtts.append(time.time_ns() - t)


# -- the service -------------------------------------------------------------------------------
def start_service(db_url: str, port: int, log_path: Path) -> ServiceProcess:
    env = {
        "AUDITSYNC_PORT": str(port),
        "AUDITSYNC_POOL_MAX": "20",
        "AUDITSYNC_KEYS_FILE": None,
        "AUDITSYNC_MAX_STREAMS": "20000",  # the 10,000-watcher row
    }
    return ServiceProcess(
        db_url, port, env=env, log_path=log_path, preexec_fn=raise_nofile, workers=WORKERS
    ).start(timeout=60)  # with every worker listening


async def sessions(http, url: str, topic: str, n: int) -> list[str]:
    gate = asyncio.Semaphore(32)

    async def one() -> str:
        body = {"topics": {topic: {"tail": True}}}
        async with gate, http.post(f"{url}/v0/watch", json=body) as r:
            assert r.status == 200, await r.text()
            return (await r.json())["stream_url"]

    return list(await asyncio.gather(*(one() for _ in range(n))))


# -- measurement -------------------------------------------------------------------------------
def pct(sorted_ns: list[int], q: float) -> float:
    if not sorted_ns:
        return float("nan")
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1e6


async def run_level(watchers: Watchers, send, n: int, pid: int, pg_pid: int) -> dict:
    """Repeats at the level's rate: medians of p50/p99/max (ms), the rate achieved, the CPU of
    the relaying process (``pid``) per delivered record, its wake-ups per appended record, the
    watchers' CPU per delivered record and PostgreSQL's (``pg_pid``) per appended record, and
    loss over all repeats."""
    runs, lost, gaps_total = [], 0, 0
    for _ in range(REPEATS[n]):
        await watchers.ask("reset")
        client0, pg0 = watchers.cpu_s(), tree_cpu_s(pg_pid)
        cpu0, wake0, t0 = tree_cpu_s(pid), tree_wakeups(pid), time.monotonic()
        sent = await produce(send, RATE[n], MEASURE_S[n])
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 5
        # the counts live in the watcher processes: nothing to wait on but their reports
        while await watchers.total() < sent * n and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        cpu, woken = tree_cpu_s(pid) - cpu0, tree_wakeups(pid) - wake0
        client, pg_cpu = watchers.cpu_s() - client0, tree_cpu_s(pg_pid) - pg0
        lats, counts, gaps = await watchers.report()
        lats.sort()
        lost += sum(max(0, sent - c) for c in counts)
        gaps_total += gaps
        runs.append(
            {
                "p50": pct(lats, 0.5),
                "p99": pct(lats, 0.99),
                "max": lats[-1] / 1e6 if lats else float("nan"),
                "rate": sent / elapsed,
                "cpu_pct": 100 * cpu / (time.monotonic() - t0),
                "us_per_delivery": 1e6 * cpu / max(1, sum(counts)),
                "us_per_append": 1e6 * cpu / max(1, sent),
                "wakeups_per_append": woken / max(1, sent),
                "client_us_per_delivery": 1e6 * client / max(1, sum(counts)),
                "pg_us_per_append": 1e6 * pg_cpu / max(1, sent),
            }
        )
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {**out, "lost": lost, "gaps": gaps_total, "repeats": len(runs)}


async def saturation(
    watchers: Watchers, http, url: str, topic: str, seconds: float = 5
) -> tuple[float, float]:
    batch = [{"data": {"t": 0}}] * 200
    appended = 0
    stop = time.monotonic() + seconds

    async def pump() -> None:
        nonlocal appended
        while time.monotonic() < stop:
            async with http.post(f"{url}/v0/topics/{topic}/records", json={"records": batch}) as r:
                assert r.status == 200
                appended += len(batch)

    await watchers.ask("reset")
    t0 = time.monotonic()
    await asyncio.gather(*(pump() for _ in range(4)))
    t1 = time.monotonic()
    delivered = await watchers.total()
    return appended / (t1 - t0), delivered / (t1 - t0)


async def extras(
    watchers: Watchers, http, url: str, port: int, pid: int
) -> tuple[float, float, float]:
    """Saturation (delivered rec/s with 100 watchers) and the RSS of 5,000 idle streams."""

    async def put(topic: str) -> None:
        async with http.put(f"{url}/v0/topics/{topic}", json={}) as r:
            assert r.status in (200, 201)

    await put("bench-sat")
    stream_urls = await sessions(http, url, "bench-sat", 100)
    await watchers.connect(port, stream_urls, b"caught-up")
    appended, delivered = await saturation(watchers, http, url, "bench-sat")
    await watchers.ask("close")
    log(
        f"saturation, 100 watchers: {appended:,.0f} appended rec/s, "
        f"{delivered:,.0f} delivered rec/s"
    )

    await put("bench-idle")
    before = tree_rss_mib(pid)
    paths = await sessions(http, url, "bench-idle", IDLE_STREAMS)
    t_open = time.monotonic()
    await watchers.connect(port, paths, b"caught-up")
    opened = time.monotonic() - t_open
    async with http.get(f"{url}/metrics") as r:
        gauge = re.search(r"^auditsync_open_streams (\S+)$", await r.text(), re.M)
    after = tree_rss_mib(pid)
    log(
        f"idle: {gauge.group(1) if gauge else '?'} open streams (opened in {opened:.1f}s); "
        f"service RSS {after:.0f} MiB in all ({before:.0f} MiB before them, which is what "
        "the earlier levels left: memory the processes keep once grown)"
    )
    await watchers.ask("close")
    return appended, delivered, after


async def bench() -> None:
    import aiohttp

    from watch_service.store.cluster import EmbeddedPostgres
    from watch_service.store.migrate import migrate

    # SIGTERM (run_all's overrun backstop) cancels the run, so the finally below still stops
    # everything this benchmark started.
    task = asyncio.current_task()
    assert task is not None  # run by asyncio.run
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    ctx = mp.get_context("spawn")
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-"))
    base.chmod(0o755)  # noqa: ASYNC240 (one call at start) - the cluster runs as postgres
    pg = EmbeddedPostgres(base / "pg", free_port())
    service = relay = watchers = None
    results: dict[str, dict] = {}
    try:
        db_url = pg.start()
        migrate(db_url)
        import psycopg

        # The postmaster's PID from its pid file, as older commits' clusters (bench/compare.py
        # runs this harness against them) have no ``pid`` property.
        pg_pid = int((pg.data_dir / "postmaster.pid").read_text().splitlines()[0])
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, data json NOT NULL)")
        load = os.getloadavg()[0]
        log(
            f"PostgreSQL on {db_url}; load average {load:.1f} on {os.cpu_count()} cores; "
            f"service with {WORKERS} worker(s)"
        )
        watchers = Watchers(ctx)
        relay_port, svc_port = free_port(), free_port()
        relay = ctx.Process(target=relay_proc, args=(db_url, relay_port), daemon=True)
        relay.start()
        assert relay.pid is not None  # set by start()
        service = start_service(db_url, svc_port, base / "service.log")
        url = f"http://127.0.0.1:{svc_port}"

        async with FloorProducer(db_url) as floor:
            await asyncio.sleep(0.5)  # let the relay LISTEN before the first watcher
            for n in RATE:
                await watchers.connect(relay_port, ["/floor"] * n, b"retry:")
                results[f"floor {n}"] = await run_level(watchers, floor.send, n, relay.pid, pg_pid)
                log(f"floor   {n:5d} watchers @ {RATE[n]}/s: {fmt(results[f'floor {n}'])}")
                await watchers.ask("close")

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as http:

            async def put(topic: str) -> None:
                async with http.put(f"{url}/v0/topics/{topic}", json={}) as r:
                    assert r.status in (200, 201)

            for n in RATE:
                topic = f"bench-{n}"
                await put(topic)

                rtts: list[int] = []
                producer = ServiceProducer(url, topic, rtts)
                await watchers.connect(svc_port, await sessions(http, url, topic, n), b"caught-up")
                async with producer:
                    results[f"service {n}"] = await run_level(
                        watchers, producer.send, n, service.pid, pg_pid
                    )
                rtts.sort()
                log(
                    f"service {n:5d} watchers @ {RATE[n]}/s: {fmt(results[f'service {n}'])}; "
                    f"the append POST itself: p50 {pct(rtts, 0.5):.2f} ms "
                    f"p99 {pct(rtts, 0.99):.2f} ms"
                )
                await watchers.ask("close")

            appended = delivered = after = float("nan")
            if EXTRAS:
                appended, delivered, after = await extras(
                    watchers, http, url, svc_port, service.pid
                )
        summary(results, appended, delivered, after)
        if JSON_OUT is not None:
            figures = {f"{key} {k}": v for key, r in results.items() for k, v in r.items()}
            figures.update(saturation_delivered=delivered, idle_rss_mib=after)
            JSON_OUT.write_text(json.dumps(figures, indent=1))
    finally:
        if watchers:
            watchers.stop()
        if relay is not None and relay.is_alive():
            relay.terminate()  # SIGTERM
            relay.join(5)
        if service is not None:
            service.stop(timeout=15)
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)


def fmt(r: dict) -> str:
    return (
        f"p50 {r['p50']:.2f} ms  p99 {r['p99']:.2f} ms  max {r['max']:.1f} ms  "
        f"({r['rate']:.0f} rec/s achieved; relay CPU {r['cpu_pct']:.0f}%, "
        f"{r['us_per_delivery']:.1f} µs per delivered record, "
        f"{r['us_per_append']:.0f} µs per appended record, "
        f"{r['wakeups_per_append']:.2f} wake-ups per appended record; watchers "
        f"{r['client_us_per_delivery']:.1f} µs per delivered record, PostgreSQL "
        f"{r['pg_us_per_append']:.0f} µs per appended record)  lost {r['lost']}  "
        f"gaps {r['gaps']}  (median of {r['repeats']})"
    )


def summary(results: dict, appended: float, delivered: float, rss: float) -> None:
    print("\n== watch latency: append → client receive (ms), medians of repeats ==")
    print(
        f"{'watchers':>8} {'rate':>5} | {'floor p50':>9} {'p99':>7} {'max':>7} | "
        f"{'service p50':>11} {'p99':>7} {'max':>7} | {'×p50':>5} {'×p99':>5} | "
        f"{'svc CPU':>7} {'µs/dlv':>6} {'µs/app':>6} {'wake/app':>8} | "
        f"{'client µs/dlv':>13} {'pg µs/app':>11} | lost"
    )
    for n in RATE:
        f, s = results[f"floor {n}"], results[f"service {n}"]
        print(
            f"{n:>8} {RATE[n]:>5} | {f['p50']:>9.2f} {f['p99']:>7.2f} {f['max']:>7.1f} | "
            f"{s['p50']:>11.2f} {s['p99']:>7.2f} {s['max']:>7.1f} | "
            f"{s['p50'] / f['p50']:>5.1f} {s['p99'] / f['p99']:>5.1f} | "
            f"{s['cpu_pct']:>6.0f}% {s['us_per_delivery']:>6.1f} {s['us_per_append']:>6.0f} "
            f"{s['wakeups_per_append']:>4.2f}/{f['wakeups_per_append']:<3.2f} | "
            f"{s['client_us_per_delivery']:>6.1f}/{f['client_us_per_delivery']:<6.1f} "
            f"{s['pg_us_per_append']:>5.0f}/{f['pg_us_per_append']:<5.0f} | "
            f"{s['lost'] + s['gaps']}"
        )
    if EXTRAS:
        print(
            f"saturation (100 watchers): {delivered:,.0f} delivered rec/s "
            f"({appended:,.0f} appended)"
        )
        print(f"5,000 idle streams: service RSS {rss:.0f} MiB (all {WORKERS} worker(s))")
    print(
        f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        "(figures are only as good as the machine is quiet)"
    )
    print(f"targets: {TARGETS}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, 2 s windows")
    parser.add_argument(
        "--workers", type=int, default=WORKERS, help="service workers (default: cores)"
    )
    parser.add_argument(
        "--levels",
        default=",".join(map(str, RATE)),
        help=f"watcher counts to run, comma-separated (default: all of {','.join(map(str, RATE))})",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--rows-only", action="store_true", help="skip the saturation and idle-stream figures"
    )
    args = parser.parse_args()
    WORKERS = args.workers
    JSON_OUT = args.json
    EXTRAS = not args.rows_only
    try:
        levels = [int(v) for v in args.levels.split(",")]
    except ValueError:
        parser.error(f"--levels {args.levels!r}: comma-separated watcher counts")
    if not levels or set(levels) - set(RATE):
        parser.error(f"--levels {args.levels!r}: each one of {', '.join(map(str, RATE))}")
    for n in set(RATE) - set(levels):
        del RATE[n]
    if args.quick:  # one repeat, shorter windows (run_all.py --quick)
        REPEATS.update(dict.fromkeys(REPEATS, 1))
        MEASURE_S.update(dict.fromkeys(MEASURE_S, 2))
    raise_nofile()
    import uvloop

    try:
        uvloop.run(asyncio.wait_for(bench(), 290))
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("bench/watch.py: stopped early; everything it started was stopped", file=sys.stderr)
        sys.exit(143)
