"""Write → watch-receive latency of authorization changes on the three watch paths at once.

One run: its own throwaway PostgreSQL (embedded, loopback, temp dir) and one ``auditsync serve``
process with the SpiceDB gRPC surface on. A writer makes N sequential ``WriteRelationships``
calls through the official ``authzed`` client; every change is received by
  * a SpiceDB ``Watch`` (``authzed`` client, its own thread),
  * the Permify REST watch (``POST /v1/tenants/t1/watch``, newline-delimited JSON, aiohttp),
  * the SSE watch of the change topic ``authz.t1`` (``POST /v0/watch`` + ``GET``, aiohttp),
and latency = receive time − the moment the write call started (so it includes the write's
own round trip and commit). Prints p50 / p99 / max per path and the ratios to SSE.

    .venv/bin/python bench/authz_watch.py [--writes 300]

Bounded (N writes, 120 s budget), loopback only; stops what it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import orjson
from authzed.api.v1 import (
    InsecureClient,
    ObjectReference,
    Relationship,
    RelationshipUpdate,
    SubjectReference,
    WatchRequest,
    WriteRelationshipsRequest,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from watch_service.protocol import authz as pa  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import ServiceProcess, free_port  # noqa: E402

KEY = "bench-key"
TOPIC = pa.change_topic("t1")
BUDGET_S = 120.0


def start_service(db_url: str, port: int, grpc_port: int, home: Path) -> ServiceProcess:
    env = {
        "AUDITSYNC_GRPC_PORT": str(grpc_port),
        "AUDITSYNC_GRPC_KEY": KEY,
        "AUDITSYNC_HOME": str(home),
    }
    return ServiceProcess(db_url, port, env=env).start()


def update(i: int) -> RelationshipUpdate:
    return RelationshipUpdate(
        operation=RelationshipUpdate.OPERATION_TOUCH,
        relationship=Relationship(
            resource=ObjectReference(object_type="bench_doc", object_id=str(i)),
            relation="viewer",
            subject=SubjectReference(object=ObjectReference(object_type="user", object_id="u")),
        ),
    )


def seq(token: str) -> int:
    return pa.decode_token(TOPIC, token)


class Received:
    """Receive times per path, keyed by change-topic seq; ``done`` once every seq is in."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.at: dict[str, dict[int, float]] = {"spicedb": {}, "permify": {}, "sse": {}}
        self.lock = threading.Lock()

    def mark(self, path: str, s: int) -> None:
        with self.lock:
            self.at[path].setdefault(s, time.perf_counter())

    def done(self, first: int) -> bool:
        with self.lock:
            return all(
                sum(1 for s in got if s > first) >= self.expected for got in self.at.values()
            )


def spicedb_reader(target: str, start, got: Received, stop: threading.Event) -> None:
    call = InsecureClient(target, KEY).Watch(WatchRequest(optional_start_cursor=start))
    threading.Thread(target=lambda: (stop.wait(), call.cancel()), daemon=True).start()
    try:
        for resp in call:
            got.mark("spicedb", seq(resp.changes_through.token))
    except Exception:
        pass  # cancelled at the end


async def permify_reader(http: aiohttp.ClientSession, url: str, token: str, got: Received) -> None:
    async with http.post(f"{url}/v1/tenants/t1/watch", json={"snap_token": token}) as resp:
        async for line in resp.content:
            doc = orjson.loads(line)
            got.mark("permify", seq(doc["result"]["changes"]["snap_token"]))


async def sse_reader(http: aiohttp.ClientSession, url: str, from_seq: int, got: Received) -> None:
    async with http.post(f"{url}/v0/watch", json={"topics": {TOPIC: {"from_seq": from_seq}}}) as r:
        wid = (await r.json())["wid"]
    async with http.get(f"{url}/v0/watch/{wid}", headers={"Accept": "text/event-stream"}) as resp:
        event = None
        async for raw in resp.content:
            line = raw.decode()
            if line.startswith("event: "):
                event = line[7:].strip()
            elif line.startswith("data: ") and event == "record":
                for rec in orjson.loads(line[6:])["records"]:
                    got.mark("sse", rec["$seq"])


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def run(writes: int, url: str, target: str) -> None:
    client = InsecureClient(target, KEY)
    first = await asyncio.to_thread(
        client.WriteRelationships, WriteRelationshipsRequest(updates=[update(-1)])
    )
    first_seq = seq(first.written_at.token)
    got, stop = Received(writes), threading.Event()
    spice = threading.Thread(target=spicedb_reader, args=(target, first.written_at, got, stop))
    spice.start()
    started: dict[int, float] = {}
    acks: list[float] = []
    # AUDITSYNC_GRPC_KEY is a key of every surface: the HTTP readers present it too.
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
        readers = [
            asyncio.create_task(permify_reader(http, url, first.written_at.token, got)),
            asyncio.create_task(sse_reader(http, url, first_seq, got)),
        ]
        await asyncio.sleep(0.5)  # let the three streams settle before timing starts

        def write_all() -> None:
            for i in range(writes):
                t0 = time.perf_counter()
                resp = client.WriteRelationships(WriteRelationshipsRequest(updates=[update(i)]))
                started[seq(resp.written_at.token)] = t0
                acks.append((time.perf_counter() - t0) * 1000)

        deadline = time.monotonic() + BUDGET_S
        await asyncio.to_thread(write_all)
        # three receivers on threads and loops of their own: poll their shared progress
        while not got.done(first_seq) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    stop.set()
    spice.join(5)
    report(started, got, acks)


def report(started: dict[int, float], got: Received, acks: list[float]) -> None:
    print(f"writes: {len(started)} (one relationship each, sequential, loopback)")
    print(f"{'path':<22}{'received':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    p50s = {}
    for path, label in (
        ("spicedb", "SpiceDB Watch (gRPC)"),
        ("permify", "Permify REST watch"),
        ("sse", "SSE watch"),
    ):
        lat = [(got.at[path][s] - t0) * 1000 for s, t0 in started.items() if s in got.at[path]]
        if not lat:
            print(f"{label:<22}{0:>9}")
            continue
        p50s[path] = pct(lat, 50)
        print(f"{label:<22}{len(lat):>9}{pct(lat, 50):>9.2f}{pct(lat, 99):>9.2f}{max(lat):>9.2f}")
    if "sse" in p50s:
        for path in ("spicedb", "permify"):
            if path in p50s:
                print(f"p50 {path} / sse: {p50s[path] / p50s['sse']:.2f}x")
    print(
        f"write ack (WriteRelationships round trip): p50 {pct(acks, 50):.2f} ms, "
        f"p99 {pct(acks, 99):.2f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-authz-"))  # the cluster owns it
    home = Path(tempfile.mkdtemp(prefix="auditsync-bench-home-"))
    cluster = EmbeddedPostgres(base, free_port())
    proc = None
    try:
        db_url = cluster.start()
        migrate(db_url)
        port, grpc_port = free_port(), free_port()
        proc = start_service(db_url, port, grpc_port, home)
        asyncio.run(run(max(1, args.writes), f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"))
    finally:
        if proc is not None:
            proc.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
