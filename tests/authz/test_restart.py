"""The seed-001 reconnect loop across a service restart (a real process, stopped and started
on the same gRPC port): no change lost or repeated past ``changes_through``; and readiness
covers the gRPC surface (a 200 from ``/readyz`` means a gRPC call succeeds at once)."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import grpc
import pytest
from authzed.api.v1 import InsecureClient, WatchRequest
from authzed.api.v1.watch_service_pb2 import WATCH_KIND_INCLUDE_CHECKPOINTS

from ..support import ServiceProcess, free_port, wait_for
from .clients import GRPC_KEY
from .spicedb_support import Op, defined_type, text, update, write

pytestmark = pytest.mark.e2e


class ReconnectingWatcher:
    """The seed's loop: Watch from the last changes_through; on any error, Watch again."""

    def __init__(self, target: str, doc: str, start) -> None:
        self.target, self.doc, self.last = target, doc, start
        self.seen: list[str] = []
        self.tokens: list[str] = []
        self.reconnects = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # Short reconnect backoff keeps the test quick; the loop itself is the seed's.
        client = InsecureClient(
            self.target,
            GRPC_KEY,
            options=[
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 300),
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        while not self.stop.is_set():
            try:
                for resp in client.Watch(
                    WatchRequest(
                        optional_start_cursor=self.last,
                        optional_object_types=[self.doc],
                        optional_update_kinds=[WATCH_KIND_INCLUDE_CHECKPOINTS],
                    )
                ):
                    self.seen += [text(u) for u in resp.updates]
                    if resp.updates:
                        self.tokens.append(resp.changes_through.token)
                    self.last = resp.changes_through
                    if self.stop.is_set():
                        return
            except grpc.RpcError:
                self.reconnects += 1
                self.stop.wait(0.05)  # backoff before the next attempt, not a synchronisation


async def test_reconnect_loop_survives_restart(pg_url, tmp_path):
    grpc_port = free_port()
    env = {
        "AUDITSYNC_GRPC_PORT": str(grpc_port),
        "AUDITSYNC_GRPC_KEY": GRPC_KEY,
        "AUDITSYNC_SPICEDB_CHECKPOINT_MS": "100",
        "AUDITSYNC_HOME": str(tmp_path),
    }
    proc = await asyncio.to_thread(
        ServiceProcess(pg_url, env=env, log_path=tmp_path / "svc.log").start
    )
    target = f"127.0.0.1:{grpc_port}"
    client = InsecureClient(target, GRPC_KEY)
    try:
        doc = await defined_type(client)
        start = await write(client, update(Op.OPERATION_TOUCH, f"{doc}:start", "owner", "user:s"))
        watcher = ReconnectingWatcher(target, doc, start.written_at)
        watcher.thread.start()
        expected = []
        for i in range(15):
            await write(client, update(Op.OPERATION_TOUCH, f"{doc}:a{i}", "viewer", "user:u"))
            expected.append(f"{doc}:a{i}#viewer@user:u")
        await wait_for(lambda: len(watcher.seen) >= 5, what="first changes")
        await asyncio.to_thread(proc.stop)
        await asyncio.to_thread(proc.start)
        # A channel of its own: the process-wide subchannel to this address is in reconnect
        # backoff (the watcher kept trying while the service was down).
        client = InsecureClient(target, GRPC_KEY, options=[("grpc.use_local_subchannel_pool", 1)])
        for i in range(15):
            await write(client, update(Op.OPERATION_TOUCH, f"{doc}:b{i}", "viewer", "user:u"))
            expected.append(f"{doc}:b{i}#viewer@user:u")
        await wait_for(
            lambda: len(watcher.seen) >= len(expected),
            timeout=20,
            what="every change after the restart",
        )
        watcher.stop.set()
        assert watcher.seen == expected
        assert len(set(watcher.tokens)) == len(watcher.tokens) == len(expected)
        assert watcher.reconnects >= 1
    finally:
        await asyncio.to_thread(proc.stop)
        if "watcher" in locals():
            watcher.stop.set()
            await asyncio.to_thread(watcher.thread.join, 5)


async def ready(url: str, proc: ServiceProcess) -> None:
    """Return at the first 200 from ``/readyz``: the moment a client may start calling."""
    async with aiohttp.ClientSession() as http:

        async def answers_200() -> bool:
            assert proc.running(), "the service exited while starting"
            try:
                async with http.get(f"{url}/readyz") as r:
                    return r.status == 200
            except aiohttp.ClientConnectionError:
                return False

        await wait_for(answers_200, timeout=60, what="/readyz 200")


async def test_ready_means_the_grpc_port_answers(pg_url, tmp_path):
    """``serve --workers 2`` with the SpiceDB gRPC surface on worker 0, started three times on
    the same ports: the first 200 of ``/readyz`` is followed at once by a gRPC call with the
    official client, on a fresh channel, and it succeeds every time."""
    grpc_port, log_path = free_port(), tmp_path / "svc.log"
    env = {"AUDITSYNC_GRPC_PORT": str(grpc_port), "AUDITSYNC_GRPC_KEY": GRPC_KEY}
    svc = ServiceProcess(pg_url, env=env, log_path=log_path, workers=2)
    for _ in range(3):
        await asyncio.to_thread(svc.spawn)
        try:
            await ready(svc.url, svc)
            client = InsecureClient(
                f"127.0.0.1:{grpc_port}", GRPC_KEY, options=[("grpc.use_local_subchannel_pool", 1)]
            )
            await defined_type(client)  # ReadSchema + WriteSchema: UNAVAILABLE if not up
        finally:
            assert await asyncio.to_thread(svc.stop) == 0
