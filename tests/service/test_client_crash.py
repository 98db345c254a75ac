"""A client's own crash costs no replay (issue 23.3): with ``serve --workers 2`` and writers
running, a watch client killed with SIGKILL reconnects at once to the *other* worker. The new
GET asks the stream it takes over to store its cursors (what it had written to the socket) and
waits for them, so

* without ``Last-Event-ID`` nothing the client processed is delivered again, and every seq
  from the resume point on arrives once, in order;
* with ``Last-Event-ID`` (a sink's resume) the stream continues exactly after the last frame
  the client processed: no copy, no seq missing.

The clients are real processes (``tests/watch/crash_client.py``) on fresh connections; the
kernel's choice of worker is read from their first line, and the reconnects are pinned to
the other worker."""

from __future__ import annotations

import asyncio
import signal
import sys

import aiohttp
import orjson
import pytest

from tests.support import ROOT, ServiceProcess, unique
from tests.watch import wire
from watch_service.serve import WORKER_HEADER

pytestmark = [pytest.mark.e2e, pytest.mark.pg]

PROCESSED = 1500  # records a client processes (both topics together) before it is killed


@pytest.fixture
async def service(pg_url, tmp_path):
    # A stream stays on the worker the kernel gave it: no stream is passed to its topics'
    # owner, so every reconnect below is taken over from the other process.
    env = {"AUDITSYNC_STREAMS_TO_OWNER": "false"}
    svc = ServiceProcess(pg_url, workers=2, log_path=tmp_path / "service.log", env=env)
    await asyncio.to_thread(svc.start, 60)
    yield svc
    await asyncio.to_thread(svc.stop)


async def on_worker(url: str, worker: str) -> aiohttp.ClientSession:
    """A client session whose one kept-alive connection is served by ``worker``."""
    for _ in range(500):
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        async with http.get(f"{url}/healthz") as r:
            await r.read()
            if r.headers[WORKER_HEADER] == worker:
                return http
        await http.close()
    raise AssertionError(f"no connection reached worker {worker}")


async def write_until(url: str, topics: list[str], stop: asyncio.Event) -> None:
    """Writers: batches of 20 records to each topic in turn, until ``stop``."""
    async with aiohttp.ClientSession() as http:
        i = 0
        while not stop.is_set():
            body = {"records": [{"data": i + j} for j in range(20)]}
            async with http.post(f"{url}/v0/topics/{topics[i % 2]}/records", json=body) as r:
                assert r.status == 200, await r.text()
            i += 1


class CrashClient:
    """``tests/watch/crash_client.py`` on ``wid``: what it processed, per topic."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.last: dict[str, int] = {}
        self.last_id = ""
        self.processed = 0

    @classmethod
    async def start(cls, port: int, wid: str) -> tuple[CrashClient, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.watch.crash_client",
            str(port),
            wid,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        worker = (await proc.stdout.readline()).decode().split()
        assert worker[0] == "worker", worker
        return cls(proc), worker[1]

    def _take(self, line: bytes) -> None:
        topic, first, last, frame_id = line.decode().split()
        assert int(first) == self.last.get(topic, 0) + 1  # what it got was gap-free
        self.last[topic], self.last_id = int(last), frame_id
        self.processed += int(last) - int(first) + 1

    async def read(self, records: int) -> None:
        assert self.proc.stdout is not None
        while self.processed < records:
            self._take(await self.proc.stdout.readline())

    async def kill(self) -> None:
        """SIGKILL; then what it printed before dying is what it processed."""
        assert self.proc.stdout is not None
        self.proc.send_signal(signal.SIGKILL)
        async for line in self.proc.stdout:
            self._take(line)
        assert await self.proc.wait() == -signal.SIGKILL


async def first_seqs(stream: wire.Stream, topics: list[str], more: int) -> dict[str, int]:
    """The first seq of each topic on ``stream``; reads on until ``more`` records of each
    topic have arrived, checking that each topic's records are consecutive."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    while len(first) < len(topics) or any(last[t] - first[t] + 1 < more for t in topics):
        fields = wire.fields(await stream.frame())
        if fields["event"] != "record":
            continue
        data = orjson.loads(fields["data"])
        topic, seqs = data["topic"], [r["$seq"] for r in data["records"]]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert data["from_seq"] == seqs[0] - 1 == last.get(topic, seqs[0] - 1)
        first.setdefault(topic, seqs[0])
        last[topic] = seqs[-1]
    return first


async def test_a_client_killed_and_back_at_once_gets_no_copies(service, tmp_path):
    topics = [unique("crash.a"), unique("crash.b")]
    async with aiohttp.ClientSession() as http:
        for topic in topics:
            async with http.put(f"{service.url}/v0/topics/{topic}", json={}) as r:
                assert r.status in (200, 201)
        body = {"topics": {t: {} for t in topics}, "heartbeat_ms": 60000}
        plain, resumed = [(await wire.create(http, service.url, body))["wid"] for _ in range(2)]
    stop = asyncio.Event()
    writers = asyncio.create_task(write_until(service.url, topics, stop))
    sessions: list[aiohttp.ClientSession] = []
    streams: list[wire.Stream] = []
    try:
        (a, on_a), (b, on_b) = [await CrashClient.start(service.port, w) for w in (plain, resumed)]
        for on in (on_a, on_b):  # the reconnects go to the other worker
            sessions.append(await on_worker(service.url, "1" if on == "0" else "0"))
        await asyncio.gather(a.read(PROCESSED), b.read(PROCESSED))
        await asyncio.gather(a.kill(), b.kill())
        streams = list(
            await asyncio.gather(
                wire.open_stream(sessions[0], service.url, plain),
                wire.open_stream(sessions[1], service.url, resumed, last_event_id=b.last_id),
            )
        )
        got_a, got_b = await asyncio.gather(
            first_seqs(streams[0], topics, 200), first_seqs(streams[1], topics, 200)
        )
    finally:
        stop.set()
        await writers
        for stream in streams:
            stream.close()
        for http in sessions:
            await http.close()
    copies = {t: max(0, a.last[t] - got_a[t] + 1) for t in topics}
    unprocessed = {t: max(0, got_a[t] - a.last[t] - 1) for t in topics}
    resumed_at = {t: got_b[t] - b.last[t] - 1 for t in topics}
    figures = f"copies {copies}, written and not processed {unprocessed}, resumed {resumed_at}"
    assert copies == dict.fromkeys(topics, 0), figures
    assert resumed_at == dict.fromkeys(topics, 0), figures
