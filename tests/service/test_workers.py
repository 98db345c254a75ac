"""``auditsync serve --workers 2`` (issue 10.2): two processes on one socket (bound by their
supervisor, inherited; a second service on the port fails its start), any worker serves any
session, a writer on one worker and watchers on both see every seq once and
in order, SIGTERM stops every worker gracefully, a dead worker stops the service, and a worker
that cannot start fails the start.

Whichever worker accepts first takes each new connection; every response names its worker
(``X-Auditsync-Worker``), so a test opens connections until it holds one to the worker it
wants and then keeps that connection (one per client session, kept alive)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support import ServiceProcess, free_port, run_cli, unique, wait_for
from tests.watch import wire
from watch_service.engine.relay import owner_of
from watch_service.serve import MULTIPROC_ENV, WORKER_HEADER

pytestmark = [pytest.mark.e2e, pytest.mark.pg]


class Pinned:
    """A client whose one kept-alive connection goes to one worker; every answer is checked."""

    def __init__(self, session: aiohttp.ClientSession, url: str, worker: str) -> None:
        self.session, self.url, self.worker = session, url, worker

    async def call(self, method: str, path: str, **kw) -> dict:
        async with self.session.request(method, self.url + path, **kw) as r:
            body = await r.json()
            assert r.headers[WORKER_HEADER] == self.worker
            assert r.status in (200, 201), (method, path, r.status, body)
            return body

    async def stream(self, wid: str, served_by: str | None = None) -> wire.Stream:
        """The stream of ``wid``, answered by ``served_by`` (default: this client's worker)."""
        stream = await wire.open_stream(self.session, self.url, wid)
        assert stream.resp.headers[WORKER_HEADER] == (served_by or self.worker)
        return stream

    async def close(self) -> None:
        await self.session.close()


async def pinned(url: str, worker: str, attempts: int = 500) -> Pinned:
    for _ in range(attempts):
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        async with session.get(f"{url}/healthz") as r:
            await r.read()
            if r.headers[WORKER_HEADER] == worker:
                return Pinned(session, url, worker)
        await session.close()
    raise AssertionError(f"{attempts} new connections and none reached worker {worker}")


def worker_pids(supervisor_pid: int) -> list[int]:
    children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text()
    return [int(p) for p in children.split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def start(
    pg_url: str, log_path: Path, env: dict[str, str | None] | None = None
) -> ServiceProcess:
    svc = ServiceProcess(pg_url, workers=2, log_path=log_path, env=env)
    await asyncio.to_thread(svc.start, 60)  # both workers listen once it returns
    return svc


@pytest.fixture(scope="module")
async def two_workers(pg_url, tmp_path_factory):
    svc = await start(pg_url, tmp_path_factory.mktemp("workers") / "service.log")
    yield svc
    await asyncio.to_thread(svc.stop)


@pytest.fixture
async def clients(two_workers):
    made: list[Pinned] = []

    async def make(worker: str) -> Pinned:
        made.append(await pinned(two_workers.url, worker))
        return made[-1]

    yield make
    for client in made:
        await client.close()


def owned_by(worker: str, prefix: str = "w.t") -> str:
    """A new topic name whose appends worker ``worker`` commits (engine/relay.py), so a
    pinned writer's connection stays where it is (web/handoff.py)."""
    while str(owner_of(topic := unique(prefix), 2)) != worker:
        pass
    return topic


async def catches_up_then_goes_live(writer: Pinned, stream: wire.Stream, topic: str) -> None:
    """``stream`` of ``topic`` (one record, seq 1) from cursor 0: the record and caught-up
    frames, then two records ``writer`` appends live, each frame's bytes exact."""
    recs = (await writer.call("GET", f"/v0/topics/{topic}/records"))["records"]
    assert await stream.frame() == wire.record_frame(topic, recs, 0, 1, {topic: 0})
    assert await stream.frame() == wire.caught_up_frame(topic, 1, {topic: 1})
    body = {"records": [{"data": {"live": i}} for i in range(2)]}
    await writer.call("POST", f"/v0/topics/{topic}/records", json=body)
    live = (await writer.call("GET", f"/v0/topics/{topic}/records?from_seq=1"))["records"]
    assert await stream.frame() == wire.record_frame(topic, live, 1, 3, {topic: 1})


async def test_a_stream_opened_on_the_other_worker_is_passed_to_its_topics_owner(
    two_workers, clients
):
    """By default a stream whose topics one other worker owns goes to that worker while it
    holds few streams (AUDITSYNC_STREAMS_TO_OWNER, 128), with its request, unanswered
    (web/handoff.py): the same TCP connection, answered and streamed by the owner, the frames'
    bytes exact."""
    await passed_to_owner(two_workers, await clients("0"), await clients("1"))


async def test_a_burst_of_streams_is_passed_whole(two_workers, clients):
    """Forty streams opened at once on worker 1 over a topic of worker 0 all go to worker 0:
    more than its queue of passed connections holds (``net.unix.max_dgram_qlen``, 10 here), so
    a stream finding the queue full waits for room (``ConnectionHandoff.writable``) instead of
    staying where it landed. Each catches up with the topic's one record."""
    w0 = await clients("0")
    topic = owned_by("0")
    await w0.call("PUT", f"/v0/topics/{topic}", json={})
    await w0.call("POST", f"/v0/topics/{topic}/records", json={"records": [{"data": 1}]})
    recs = (await w0.call("GET", f"/v0/topics/{topic}/records"))["records"]
    watchers = [await clients("1") for _ in range(40)]
    wids = [
        (await w0.call("POST", "/v0/watch", json={"topics": {topic: {}}}))["wid"] for _ in watchers
    ]
    passed = "auditsync_connections_passed_total"
    before = await series_total(two_workers.url, passed)
    streams = await asyncio.gather(
        *(w.stream(wid, served_by="0") for w, wid in zip(watchers, wids, strict=True))
    )
    try:
        assert await series_total(two_workers.url, passed) - before == 40
        for stream in streams:
            assert await stream.frames(2) == [
                wire.record_frame(topic, recs, 0, 1, {topic: 0}),
                wire.caught_up_frame(topic, 1, {topic: 1}),
            ]
    finally:
        for stream in streams:
            stream.close()


async def passed_to_owner(svc: ServiceProcess, w0: Pinned, w1: Pinned) -> None:
    topic = owned_by("0")
    await w0.call("PUT", f"/v0/topics/{topic}", json={})
    await w0.call("POST", f"/v0/topics/{topic}/records", json={"records": [{"data": 1}]})
    created = await w0.call("POST", "/v0/watch", json={"topics": {topic: {}}})
    passed = "auditsync_connections_passed_total"
    gets = 'auditsync_http_requests_total{method="GET",route="/v0/watch/{wid}",status="200"}'
    before, got_before = [await series_total(svc.url, n) for n in (passed, gets)]

    stream = await w1.stream(created["wid"], served_by="0")
    try:
        assert await series_total(svc.url, passed) - before == 1
        # worker 1 does not count the request it passed on: worker 0 counts it, once it ends
        assert await series_total(svc.url, gets) == got_before
        await catches_up_then_goes_live(w0, stream, topic)
    finally:
        stream.close()

    async def counted_once() -> bool:
        return await series_total(svc.url, gets) == got_before + 1

    await wait_for(counted_once, timeout=10, what="the ended stream's request counted once")


async def test_a_stream_stays_where_it_was_opened_once_the_owner_holds_the_limit(pg_url, tmp_path):
    """With AUDITSYNC_STREAMS_TO_OWNER=1 the first stream opened on worker 1 over a topic of
    worker 0 is passed there; the second, while worker 0 holds that one, stays on worker 1
    (the kernel's choice), and the appends reach it through the NOTIFY: one connection
    passed for the two streams, both streams' frames exact."""
    svc = await start(pg_url, tmp_path / "service.log", {"AUDITSYNC_STREAMS_TO_OWNER": "1"})
    w0, w1 = await pinned(svc.url, "0"), await pinned(svc.url, "1")
    streams: list[wire.Stream] = []
    try:
        topic = owned_by("0")
        await w0.call("PUT", f"/v0/topics/{topic}", json={})
        await w0.call("POST", f"/v0/topics/{topic}/records", json={"records": [{"data": 1}]})
        first, second = [
            (await w0.call("POST", "/v0/watch", json={"topics": {topic: {}}}))["wid"]
            for _ in range(2)
        ]
        passed = "auditsync_connections_passed_total"
        before = await series_total(svc.url, passed)
        streams.append(await w1.stream(first, served_by="0"))
        recs = (await w0.call("GET", f"/v0/topics/{topic}/records"))["records"]
        assert await streams[0].frames(2) == [
            wire.record_frame(topic, recs, 0, 1, {topic: 0}),
            wire.caught_up_frame(topic, 1, {topic: 1}),
        ]
        # The owner's count is stored once its stream holds a slot: the frames above say so.
        w1b = await pinned(svc.url, "1")
        try:
            streams.append(await w1b.stream(second, served_by="1"))
            assert await series_total(svc.url, passed) - before == 1
            await catches_up_then_goes_live(w0, streams[1], topic)
            live = (await w0.call("GET", f"/v0/topics/{topic}/records?from_seq=1"))["records"]
            assert await streams[0].frame() == wire.record_frame(topic, live, 1, 3, {topic: 1})
        finally:
            await w1b.close()
    finally:
        for stream in streams:
            stream.close()
        for client in (w0, w1):
            await client.close()
        await asyncio.to_thread(svc.stop)


async def test_a_stream_over_topics_of_both_workers_stays_where_it_was_opened(clients):
    """A stream over topics of both workers stays where it was opened, whichever worker
    created its session."""
    w0, w1 = await clients("0"), await clients("1")
    topic, side = owned_by("0"), owned_by("1")
    for name in (topic, side):
        await w0.call("PUT", f"/v0/topics/{name}", json={})
    await w0.call("POST", f"/v0/topics/{topic}/records", json={"records": [{"data": 1}]})
    created = await w0.call("POST", "/v0/watch", json={"topics": {topic: {}, side: {}}})

    stream = await w1.stream(created["wid"])
    try:
        recs = (await w0.call("GET", f"/v0/topics/{topic}/records"))["records"]
        rec = wire.record_frame(topic, recs, 0, 1, {topic: 0, side: 0})
        done = wire.caught_up_frame(topic, 1, {topic: 1, side: 0})
        assert await stream.frames(3) in (  # the topics are drained in either order
            [rec, done, wire.caught_up_frame(side, 0, {topic: 1, side: 0})],
            [wire.caught_up_frame(side, 0, {topic: 0, side: 0}), rec, done],
        )
        body = {"records": [{"data": {"live": i}} for i in range(2)]}
        await w0.call("POST", f"/v0/topics/{topic}/records", json=body)
        live = (await w0.call("GET", f"/v0/topics/{topic}/records?from_seq=1"))["records"]
        assert await stream.frame() == wire.record_frame(topic, live, 1, 3, {topic: 1, side: 0})
    finally:
        stream.close()


async def open_live_streams(clients: list[Pinned]) -> tuple[str, list[wire.Stream]]:
    """Live streams, one on each client's worker: each watches ``topic`` (owned by the first
    client's worker) and a quiet topic of the other worker, so none is passed to an owner."""
    topic = owned_by(clients[0].worker)
    side = owned_by(str(1 - int(clients[0].worker)))
    for name in (topic, side):
        await clients[0].call("PUT", f"/v0/topics/{name}", json={})
    streams = []
    for client in clients:
        created = await client.call("POST", "/v0/watch", json={"topics": {topic: {}, side: {}}})
        streams.append(await client.stream(created["wid"]))
        opening = await streams[-1].frames(2)
        cursors = {topic: 0, side: 0}
        assert sorted(opening) == sorted(
            [wire.caught_up_frame(topic, 0, cursors), wire.caught_up_frame(side, 0, cursors)]
        )
    return topic, streams


async def seqs_until(stream: wire.Stream, topic: str, last: int) -> list[int]:
    seen: list[int] = []
    while not seen or seen[-1] < last:
        fields = wire.fields(await stream.frame())
        if fields["event"] == "record":
            seen += [r["$seq"] for r in orjson.loads(fields["data"])["records"]]
    return seen


async def test_a_writer_on_one_worker_and_watchers_on_both_see_every_seq_once_in_order(clients):
    writer, on0, on1 = await clients("0"), await clients("0"), await clients("1")
    topic, streams = await open_live_streams([on0, on1])
    try:
        total = 60
        watching = [asyncio.create_task(seqs_until(s, topic, total)) for s in streams]
        for i in range(0, total, 3):
            body = {"records": [{"data": i + j} for j in range(3)]}
            await writer.call("POST", f"/v0/topics/{topic}/records", json=body)
        async with asyncio.timeout(20):
            seen = await asyncio.gather(*watching)
        assert seen == [list(range(1, total + 1))] * 2
    finally:
        for s in streams:
            s.close()


async def series_total(url: str, name: str) -> float:
    """The value of counter ``name`` summed over both workers, as /metrics exposes it."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        text = await r.text()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


async def relayed_total(client: Pinned) -> float:
    return await series_total(client.url, "auditsync_appends_relayed_total")


async def test_writers_on_both_workers_share_the_owners_groups(two_workers, clients):
    """Appends to a topic through the worker that does not own it are sent to the owner
    (engine/relay.py): every request keeps its own range, the ranges tile the topic, and the
    metric counts exactly the requests the other worker took. (Chunked bodies keep that
    connection on its worker: see the hand-off tests below.)"""
    topic = owned_by("1")
    on_owner = await clients("1")
    on_other = await RawConnection.to_worker(two_workers.port, "0")
    try:
        await on_owner.call("PUT", f"/v0/topics/{topic}", json={})
        before = await relayed_total(on_owner)

        async def via_other() -> list[dict]:
            bodies = []
            for i in range(6):
                on_other.send(append_request(topic, i, records=2, chunked=True))
                worker, status, body = await on_other.answer()
                assert (worker, status) == ("0", 200)
                bodies.append(body)
            return bodies

        async def via_owner() -> list[dict]:
            path = f"/v0/topics/{topic}/records"
            return [
                await on_owner.call("POST", path, json={"records": [{"data": i}]}) for i in range(6)
            ]

        mine, relayed = await asyncio.gather(via_owner(), via_other())
        results = mine + relayed
        seqs = sorted(s for r in results for s in range(r["first_seq"], r["last_seq"] + 1))
        assert seqs == list(range(1, 19))
        assert [r["last_seq"] - r["first_seq"] + 1 for r in results] == [1] * 6 + [2] * 6
        assert await relayed_total(on_owner) - before == 6
    finally:
        on_other.close()


class RawConnection:
    """One TCP connection speaking HTTP/1.1 byte for byte: what it sends is exactly what the
    test wrote, so a test controls how requests fall into reads (pipelining, chunking)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def to_worker(cls, port: int, worker: str, attempts: int = 500) -> RawConnection:
        for _ in range(attempts):
            conn = cls(*await asyncio.open_connection("127.0.0.1", port))
            conn.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            if (await conn.answer())[0] == worker:
                return conn
            conn.close()
        raise AssertionError(f"{attempts} new connections and none reached worker {worker}")

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answer(self) -> tuple[str, int, dict]:
        """(the worker that answered, status, JSON body) of the next response."""
        async with asyncio.timeout(10):
            head = (await self.reader.readuntil(b"\r\n\r\n")).decode()
            headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
            body = await self.reader.readexactly(int(headers["Content-Length"]))
        return headers[WORKER_HEADER], int(head.split(" ")[1]), orjson.loads(body)

    def close(self) -> None:
        self.writer.close()


def append_request(topic: str, value: int, records: int = 1, chunked: bool = False) -> bytes:
    body = orjson.dumps({"records": [{"data": value}] * records})
    head = (
        f"POST /v0/topics/{topic}/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    )
    if chunked:
        return (
            f"{head}Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n".encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


async def other_worker_topic(two_workers, owner: str) -> str:
    """A new topic owned by worker ``owner``, created."""
    topic = owned_by(owner, "w.h")
    async with aiohttp.ClientSession() as http:
        async with http.put(f"{two_workers.url}/v0/topics/{topic}", json={}) as r:
            assert r.status == 201
    return topic


async def test_a_connection_appending_to_the_other_workers_topic_moves_to_it(two_workers):
    """Once the first append is answered, the connection itself goes to the topic's owner
    (web/handoff.py): the same TCP connection, the next answers from the owner, no relay."""
    conn = await RawConnection.to_worker(two_workers.port, "0")
    try:
        topic = await other_worker_topic(two_workers, "1")
        counters = ("auditsync_connections_passed_total", "auditsync_appends_relayed_total")
        before = [await series_total(two_workers.url, name) for name in counters]
        answers = []
        for i in range(5):
            conn.send(append_request(topic, i))
            answers.append(await conn.answer())
        after = [await series_total(two_workers.url, name) for name in counters]
        assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1]
        assert [(w, s, b["first_seq"]) for w, s, b in answers] == [
            ("0", 200, 1),
            ("1", 200, 2),
            ("1", 200, 3),
            ("1", 200, 4),
            ("1", 200, 5),
        ]
        # a connection is passed once: appends to worker 0's topics now stay on worker 1
        mine = await other_worker_topic(two_workers, "0")
        for i in range(2):
            conn.send(append_request(mine, i))
            assert (await conn.answer())[:2] == ("1", 200)
    finally:
        conn.close()


@pytest.mark.parametrize("how", ["pipelined", "chunked"])
async def test_a_connection_with_anything_half_read_stays(two_workers, how):
    """Pipelined requests (bytes of the next request already read) and chunked bodies (no
    length to account for) keep the connection where it is; its appends are relayed."""
    conn = await RawConnection.to_worker(two_workers.port, "0")
    try:
        topic = await other_worker_topic(two_workers, "1")
        if how == "pipelined":
            conn.send(append_request(topic, 1) + append_request(topic, 2))
            assert (await conn.answer())[:2] == ("0", 200)
        else:
            conn.send(append_request(topic, 1, chunked=True))
            assert (await conn.answer())[:2] == ("0", 200)
            conn.send(append_request(topic, 2))
        assert (await conn.answer())[:2] == ("0", 200)
        for i in range(3, 5):
            conn.send(append_request(topic, i))
            worker, status, body = await conn.answer()
            assert (worker, status, body["first_seq"]) == ("0", 200, i)
    finally:
        conn.close()


SHUTDOWN_FRAME = wire.frame(
    "error",
    wire.compact({"code": "unavailable", "message": "the service is shutting down; reconnect"}),
    None,
)


async def test_a_second_service_on_the_port_fails_its_start(two_workers, pg_url):
    """The workers share the one socket their supervisor bound (no SO_REUSEPORT), so a second
    service on the port, even with other flags, is one line and exit 2, and the first one
    answers every request after it."""
    before = worker_pids(two_workers.pid)
    code, out, err = await run_cli(
        "serve",
        "--no-migrate",
        "--port",
        str(two_workers.port),
        "--workers",
        "2",
        env={"DATABASE_URL": pg_url},
    )
    assert (code, out) == (2, "")
    assert err == (
        f"auditsync: cannot listen on 127.0.0.1:{two_workers.port} (AUDITSYNC_PORT / --port): "
        "the port is already in use\n"
    )
    answered: dict[str, int] = {}
    for _ in range(40):  # a new connection each: the kernel picks its process afresh
        async with aiohttp.ClientSession() as http, http.get(f"{two_workers.url}/healthz") as r:
            assert (r.status, await r.json()) == (200, {"status": "ok"})
            worker = r.headers[WORKER_HEADER]
            answered[worker] = answered.get(worker, 0) + 1
    assert sum(answered.values()) == 40 and set(answered) <= {"0", "1"}
    assert worker_pids(two_workers.pid) == before and all(alive(p) for p in before)
    assert two_workers.running()


async def test_sigterm_stops_every_worker_gracefully(two_workers, clients):
    """The module's last test: it stops the module's service."""
    pids = worker_pids(two_workers.pid)
    assert len(pids) == 2
    environs = [Path(f"/proc/{p}/environ").read_bytes().split(b"\0") for p in pids]
    metrics_dirs = {
        kv.split(b"=", 1)[1].decode()
        for env in environs
        for kv in env
        if kv.startswith(MULTIPROC_ENV.encode() + b"=")
    }
    assert len(metrics_dirs) == 1  # one folder for all workers, private to the service
    (metrics_dir,) = metrics_dirs
    assert stat.S_IMODE(os.stat(metrics_dir).st_mode) == 0o700

    _, streams = await open_live_streams([await clients("0"), await clients("1")])
    stopping = asyncio.create_task(asyncio.to_thread(two_workers.stop))
    for stream in streams:  # each worker ends its streams with the shutdown frame
        assert await stream.frame() == SHUTDOWN_FRAME
        await stream.closed()
    assert await stopping == 0
    assert not any(alive(p) for p in pids)
    assert not os.path.exists(metrics_dir)


async def test_a_dead_worker_stops_the_service_with_an_error(pg_url, tmp_path):
    """No silent restart: the death is logged, the other worker stops gracefully, exit 1."""
    log_path = tmp_path / "service.log"
    svc = await start(pg_url, log_path)
    w0 = await pinned(svc.url, "0")
    try:
        first, second = worker_pids(svc.pid)
        _, (stream,) = await open_live_streams([w0])
        os.kill(second, signal.SIGKILL)
        assert await stream.frame() == SHUTDOWN_FRAME
        await stream.closed()
        assert await asyncio.to_thread(svc.proc.wait, 20) == 1
        assert not alive(first)
        assert f"worker 1 (pid {second}) exited with -9" in log_path.read_text()
    finally:
        await w0.close()
        svc.stop(signal.SIGKILL)


async def test_a_port_in_use_fails_the_start_before_any_worker(pg_url):
    """The supervisor binds the port before starting PostgreSQL or a worker: a port held by
    another process is one line and exit 2, with no worker started."""
    with socket.socket() as taken:
        port = free_port()
        taken.bind(("127.0.0.1", port))
        taken.listen()
        code, _out, err = await run_cli(
            "serve",
            "--no-migrate",
            "--port",
            str(port),
            "--workers",
            "2",
            env={"DATABASE_URL": pg_url},
        )
    assert code == 2
    assert err == (
        f"auditsync: cannot listen on 127.0.0.1:{port} (AUDITSYNC_PORT / --port): "
        "the port is already in use\n"
    )


async def test_the_stream_cap_counts_every_workers_streams(pg_url, tmp_path):
    """AUDITSYNC_MAX_STREAMS is service-wide (web/stream_slots.py): with a cap of 3 and two
    workers, 2 streams on worker 0 and 1 on worker 1 fill it; a 4th is 429 on either worker
    (worker 1 alone holds 1, under any per-worker share); a stream that ends frees its slot."""
    svc = ServiceProcess(
        pg_url, workers=2, log_path=tmp_path / "service.log", env={"AUDITSYNC_MAX_STREAMS": "3"}
    )
    await asyncio.to_thread(svc.start, 60)
    made: list[Pinned] = []
    streams: list[wire.Stream] = []
    try:
        for worker in ("0", "0", "1", "0", "1"):
            made.append(await pinned(svc.url, worker))
        a0, b0, a1, c0, c1 = made
        topic, side = owned_by("0"), owned_by("1")  # topics of both: no stream is passed
        for name in (topic, side):
            await a0.call("PUT", f"/v0/topics/{name}", json={})
        wids = [
            (await a0.call("POST", "/v0/watch", json={"topics": {topic: {}, side: {}}}))["wid"]
            for _ in range(5)
        ]
        for client, wid in zip((a0, b0, a1), wids, strict=False):
            streams.append(await client.stream(wid))
        for client, wid in ((c0, wids[3]), (c1, wids[4])):
            async with client.session.get(f"{svc.url}/v0/watch/{wid}", headers=wire.SSE) as r:
                assert (r.status, r.headers[WORKER_HEADER], r.headers["Retry-After"]) == (
                    429,
                    client.worker,
                    "2",
                )
                assert await r.json() == {
                    "error": {
                        "code": "throttled",
                        "message": "stream cap of 3 open streams (service-wide) reached; "
                        "retry later",
                    }
                }
        streams.pop(0).close()  # worker 0's first stream ends: one slot is free, anywhere

        async def admitted() -> bool:
            resp = await c1.session.get(f"{svc.url}/v0/watch/{wids[4]}", headers=wire.SSE)
            if resp.status == 429:
                await resp.read()
                return False
            assert resp.status == 200 and resp.headers[WORKER_HEADER] == "1"
            streams.append(wire.Stream(resp))
            return True

        await wait_for(admitted, timeout=10, what="the freed slot to admit a stream")
    finally:
        for stream in streams:
            stream.close()
        for client in made:
            await client.close()
        await asyncio.to_thread(svc.stop)


def test_streams_to_owner_takes_a_count_or_a_word():
    """AUDITSYNC_STREAMS_TO_OWNER: a count of the owner's streams below which a stream is
    passed (default 128; 0: never), or true / false; anything else fails the start by name."""
    from watch_service.settings import OWNER_ALWAYS, SettingsError, load

    def limit(raw: str) -> int:
        return load({"AUDITSYNC_STREAMS_TO_OWNER": raw}).streams_to_owner

    assert load({}).streams_to_owner == 128
    assert [limit(r) for r in ("0", "1", "5000", " 64 ")] == [0, 1, 5000, 64]
    assert [limit(r) for r in ("true", "On", "yes")] == [OWNER_ALWAYS] * 3
    assert [limit(r) for r in ("false", "OFF", "no")] == [0] * 3
    for raw in ("-1", "1.5", "lots", "1e3", "9999999999"):
        with pytest.raises(SettingsError) as err:
            limit(raw)
        assert str(err.value) == (
            "AUDITSYNC_STREAMS_TO_OWNER: expected a stream count (0 = never), true or false, "
            f"got {raw!r}"
        )


def test_each_worker_gets_its_share_of_the_tail_cache_budget():
    """AUDITSYNC_TAIL_CACHE_BYTES is service-wide: the workers' parts add up to it exactly;
    the stream cap stays whole (counted together), the pool is per worker."""
    from watch_service.serve import share, worker_settings
    from watch_service.settings import Settings

    settings = Settings(tail_cache_bytes=10, max_streams=7, pool_max=4, grpc_port=50051)
    parts = [worker_settings(settings, i, 3) for i in range(3)]
    assert [p.tail_cache_bytes for p in parts] == [4, 3, 3]
    assert [p.max_streams for p in parts] == [7, 7, 7]
    assert [p.pool_max for p in parts] == [4, 4, 4]
    assert [p.grpc_port for p in parts] == [50051, None, None]
    assert sum(share(64 << 20, i, 16) for i in range(16)) == 64 << 20
    assert worker_settings(settings, 0, 1) == settings


def test_shared_stream_slots_count_every_worker(tmp_path):
    """Two workers' views of one slot file (web/stream_slots.py): a take anywhere counts
    everywhere, a give-back frees the slot for either, and a closed view takes nothing."""
    from watch_service.web.stream_slots import SharedStreamSlots

    w0, w1 = (SharedStreamSlots(2, str(tmp_path), i, 2) for i in range(2))
    try:
        assert (w0.try_take(), w1.try_take()) == (True, True)
        assert (w0.try_take(), w1.try_take()) == (False, False)
        assert (w0.total(), w1.total()) == (2, 2)
        w0.give_back()
        assert w1.try_take() and (w0.held, w1.held, w1.total()) == (0, 2, 2)
        w1.close()
        assert not w1.try_take()
        w1.give_back()  # after close: nothing to give back to
        assert w0.total() == 2 and not w0.try_take()
    finally:
        w0.close()
        w1.close()
