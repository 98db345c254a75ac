"""Write → watch-receive latency of authorization changes on the four watch paths at once.

One run: its own throwaway PostgreSQL (embedded, loopback, temp dir) and one ``auditsync serve``
process with the SpiceDB and Permify gRPC surfaces on. A writer makes N sequential
``WriteRelationships`` calls through the official ``authzed`` client; every change is received by
  * a SpiceDB ``Watch`` (``authzed`` client, its own thread),
  * the Permify REST watch (``POST /v1/tenants/t1/watch``, newline-delimited JSON, aiohttp),
  * the Permify gRPC ``base.v1.Watch/Watch`` (``grpc.aio``, the service's committed stubs),
  * the SSE watch of the change topic ``authz.t1`` (``POST /v0/watch`` + ``GET``, aiohttp),
and latency = receive time − the moment the write call started (so it includes the write's
own round trip and commit). The floor is the write's own acknowledged round trip. Each repeat
prints p50 / p99 / max per path; the summary is the median over repeats of each figure, its
ratios to SSE and to the floor, and the load average before and after.

    .venv/bin/python bench/authz_watch.py [--writes 300] [--repeats 3]

Bounded (N writes, 120 s budget), loopback only; stops what it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import grpc
import orjson
from authzed.api.v1 import (
    InsecureClient,
    ObjectReference,
    Relationship,
    RelationshipUpdate,
    SubjectReference,
    WatchRequest,
    WriteRelationshipsRequest,
    WriteSchemaRequest,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from watch_service.compat.proto import permify_base_v1_pb2 as pb  # noqa: E402
from watch_service.compat.proto import permify_base_v1_pb2_grpc as pb_grpc  # noqa: E402
from watch_service.protocol import authz as pa  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.tools.local import ServiceProcess, free_port  # noqa: E402

KEY = "bench-key"
TOPIC = pa.change_topic("t1")
BUDGET_S = 120.0
# writes are validated against the tenant's SpiceDB schema, so the bench declares its types
SCHEMA = (
    "definition user {}\n\ndefinition bench_doc {\n\trelation viewer: user\n"
    "\tpermission view = viewer\n}"
)
PATHS = (
    ("spicedb", "SpiceDB Watch (gRPC)"),
    ("permify", "Permify REST watch"),
    ("permify_grpc", "Permify gRPC Watch"),
    ("sse", "SSE watch"),
)


def start_service(
    db_url: str, port: int, grpc_port: int, permify_port: int, home: Path
) -> ServiceProcess:
    env = {
        "AUDITSYNC_GRPC_PORT": str(grpc_port),
        "AUDITSYNC_PERMIFY_GRPC_PORT": str(permify_port),
        "AUDITSYNC_GRPC_KEY": KEY,
        "AUDITSYNC_HOME": str(home),
    }
    return ServiceProcess(db_url, port, env=env).start()


def update(i: int | str) -> RelationshipUpdate:
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
        self.at: dict[str, dict[int, float]] = {
            "spicedb": {},
            "permify": {},
            "permify_grpc": {},
            "sse": {},
        }
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


async def permify_grpc_reader(target: str, token: str, got: Received) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        call = pb_grpc.WatchStub(channel).Watch(pb.WatchRequest(tenant_id="t1", snap_token=token))
        async for resp in call:
            got.mark("permify_grpc", seq(resp.changes.snap_token))


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


async def run(
    writes: int, url: str, target: str, permify_target: str, repeat: int
) -> dict[str, tuple[float, float]]:
    client = await asyncio.to_thread(InsecureClient, target, KEY)
    await asyncio.to_thread(client.WriteSchema, WriteSchemaRequest(schema=SCHEMA))
    first = await asyncio.to_thread(
        client.WriteRelationships, WriteRelationshipsRequest(updates=[update(f"{repeat}-start")])
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
            asyncio.create_task(permify_grpc_reader(permify_target, first.written_at.token, got)),
            asyncio.create_task(sse_reader(http, url, first_seq, got)),
        ]
        await asyncio.sleep(0.5)  # let the four streams settle before timing starts

        def write_all() -> None:
            for i in range(writes):
                t0 = time.perf_counter()
                req = WriteRelationshipsRequest(updates=[update(f"{repeat}-{i}")])
                resp = client.WriteRelationships(req)
                started[seq(resp.written_at.token)] = t0
                acks.append((time.perf_counter() - t0) * 1000)

        deadline = time.monotonic() + BUDGET_S
        await asyncio.to_thread(write_all)
        # four receivers on threads and loops of their own: poll their shared progress
        while not got.done(first_seq) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    stop.set()
    spice.join(5)
    return report(started, got, acks)


def report(
    started: dict[int, float], got: Received, acks: list[float]
) -> dict[str, tuple[float, float]]:
    """Print one repeat's figures; returns (p50, p99) per path and for the ack floor."""
    print(f"writes: {len(started)} (one relationship each, sequential, loopback)")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"{'path':<22}{'received':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    out = {"ack": (pct(acks, 50), pct(acks, 99))}
    for path, label in PATHS:
        lat = [(got.at[path][s] - t0) * 1000 for s, t0 in started.items() if s in got.at[path]]
        if not lat:
            print(f"{label:<22}{0:>9}")
            continue
        out[path] = (pct(lat, 50), pct(lat, 99))
        print(f"{label:<22}{len(lat):>9}{pct(lat, 50):>9.2f}{pct(lat, 99):>9.2f}{max(lat):>9.2f}")
    print(f"write ack (floor){'':<5}{len(acks):>9}{out['ack'][0]:>9.2f}{out['ack'][1]:>9.2f}")
    return out


def summary(runs: list[dict[str, tuple[float, float]]], load_before: tuple) -> None:
    """Medians over the repeats, ratios to SSE and to the write-ack floor."""
    print(f"\nmedian of {len(runs)} repeats")
    print(f"{'path':<22}{'p50 ms':>9}{'p99 ms':>9}{'p50/sse':>9}{'p50/ack':>9}")
    med = {
        key: tuple(statistics.median(r[key][i] for r in runs if key in r) for i in (0, 1))
        for key in ("ack", *(p for p, _ in PATHS))
        if any(key in r for r in runs)
    }
    for path, label in (*PATHS, ("ack", "write ack (floor)")):
        if path not in med:
            continue
        p50, p99 = med[path]
        vs_sse = f"{p50 / med['sse'][0]:.2f}x" if "sse" in med else "-"
        print(f"{label:<22}{p50:>9.2f}{p99:>9.2f}{vs_sse:>9}{p50 / med['ack'][0]:>8.2f}x")
    load_after = os.getloadavg()
    print(
        "load average (1/5/15 min): before "
        + " ".join(f"{x:.2f}" for x in load_before)
        + ", after "
        + " ".join(f"{x:.2f}" for x in load_after)
        + f" ({os.cpu_count()} cores)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-authz-"))  # the cluster owns it
    home = Path(tempfile.mkdtemp(prefix="auditsync-bench-home-"))
    cluster = EmbeddedPostgres(base, free_port())
    proc = None
    try:
        db_url = cluster.start()
        migrate(db_url)
        port, grpc_port, permify_port = free_port(), free_port(), free_port()
        proc = start_service(db_url, port, grpc_port, permify_port, home)
        runs = []
        for repeat in range(max(1, min(args.repeats, 9))):
            print(f"\nrepeat {repeat + 1}")
            url, target = f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"
            permify_target = f"127.0.0.1:{permify_port}"
            runs.append(asyncio.run(run(max(1, args.writes), url, target, permify_target, repeat)))
        summary(runs, load_before)
    finally:
        if proc is not None:
            proc.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
