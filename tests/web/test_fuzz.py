"""Hostile input on every route, seeded and bounded: thousands of malformed requests against a
keyed service over real sockets (the aiohttp client for body, header, query and name garbage;
raw asyncio streams for bytes aiohttp's parser refuses), and

- not one answer is a 5xx;
- every non-2xx is JSON with the contract's error body (``{"error": {"code", "message"}}``;
  Permify routes may answer grpc-gateway's ``{"code", "message", "details"}``), never an echo
  of the request bytes;
- nothing is written by a refused request: the counted topic's head moved by exactly the
  records acknowledged, the Permify tenant's change topic by exactly the acknowledged writes,
  and the sessions, topics and tenants that exist are those whose creation was acknowledged.
"""

import asyncio
import collections
import dataclasses
import os

import aiohttp
import orjson
import pytest

from tests.support import InProcessService
from watch_service.protocol import authz as pa
from watch_service.web.auth import hash_secret

from .fuzz_requests import (
    ADMIN,
    MARKER,
    ROUTES,
    RUN,
    RW,
    SCHEMA,
    TENANT,
    TOPIC,
    Fuzzer,
    Route,
    raw_request,
    send_raw,
)

pytestmark = [pytest.mark.service, pytest.mark.pg]

# A longer or different run: FUZZ_SEED=23 FUZZ_CLIENT_REQUESTS=40000 pytest tests/web/test_fuzz.py
SEED = int(os.environ.get("FUZZ_SEED", "11"))
CLIENT_REQUESTS = int(os.environ.get("FUZZ_CLIENT_REQUESTS", "4000"))
RAW_REQUESTS = int(os.environ.get("FUZZ_RAW_REQUESTS", "1000"))
WORKERS = 8


FIVE_XX: list[tuple[int, str, bytes]] = []  # every 5xx seen, reported together at the end


def check_error(status: int, ctype: str, raw: bytes, path: str, echo_ok: bool = True) -> None:
    """A contract error body; with ``echo_ok`` false (parser-level garbage) none of the
    request's bytes come back. (A route may name a field it refuses, MARKER included.)"""
    if status >= 500:
        FIVE_XX.append((status, path, raw[:200]))
        return
    assert ctype.startswith("application/json"), (status, path, ctype, raw[:300])
    assert echo_ok or MARKER.encode() not in raw, (status, path, raw[:300])
    doc = orjson.loads(raw)
    if "error" in doc:
        assert set(doc) == {"error"} and set(doc["error"]) == {"code", "message"}, doc
        assert isinstance(doc["error"]["message"], str) and doc["error"]["code"], doc
    else:  # Permify's grpc-gateway body
        assert path.startswith("/v1/") and set(doc) == {"code", "message", "details"}, (path, doc)


@pytest.fixture(scope="module")
async def fuzz_service(pg_url, base_settings, tmp_path_factory, http):
    keys = tmp_path_factory.mktemp("fuzz") / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "fz-rw"\nsecret_sha256 = "{hash_secret(RW)}"\nscopes = ["read", "write"]\n'
        f'prefixes = ["{RUN}", "{pa.change_topic(RUN)}"]\n\n'
        f'[[keys]]\nid = "fz-admin"\nsecret_sha256 = "{hash_secret(ADMIN)}"\n'
        f'scopes = ["read", "write", "admin"]\nprefixes = ["{RUN}", "{pa.change_topic(RUN)}"]\n'
    )
    settings = dataclasses.replace(
        base_settings,
        keys_file=keys,
        max_body_bytes=64 * 1024,
        header_timeout_s=1.0,  # short: a half-sent raw request is answered 408 quickly
        body_timeout_s=1.0,
    )
    svc = await InProcessService(settings, pg_url).start()
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for path, body in [
        (f"/v0/topics/{TOPIC}", None),
        ("/v1/tenants/create", {"id": TENANT, "name": "fuzz"}),
        (f"/v1/tenants/{TENANT}/schemas/write", {"schema": SCHEMA}),
    ]:
        method = "PUT" if body is None else "POST"
        async with http.request(method, svc.url + path, json=body or {}, headers=admin) as r:
            assert r.status in (200, 201), await r.text()
    yield svc
    await svc.stop()


async def snapshot(db) -> dict:
    one = lambda sql, *a: db.execute(sql, a)  # noqa: E731
    head = (await (await one("SELECT head_seq FROM topics WHERE name = %s", TOPIC)).fetchone())[0]
    rows = (await (await one("SELECT count(*) FROM records WHERE topic = %s", TOPIC)).fetchone())[0]
    change = pa.change_topic(TENANT)
    chead = (await (await one("SELECT head_seq FROM topics WHERE name = %s", change)).fetchone())[0]
    sessions = (
        await (
            await one("SELECT count(*) FROM watch_sessions WHERE key_id LIKE 'fz-%%'")
        ).fetchone()
    )[0]
    topics = {
        r[0]
        for r in await (
            await one("SELECT name FROM topics WHERE name LIKE %s", RUN + "-x%")
        ).fetchall()
    }
    tenants = {
        r[0]
        for r in await (
            await one("SELECT id FROM authz_tenants WHERE id LIKE %s", RUN + "-x%")
        ).fetchall()
    }
    return {
        "head": head,
        "rows": rows,
        "change_head": chead,
        "sessions": sessions,
        "topics": topics,
        "tenants": tenants,
    }


@dataclasses.dataclass
class Acked:
    """What the service acknowledged (2xx) while being fuzzed."""

    records: int = 0
    change_seqs: set = dataclasses.field(default_factory=set)
    sessions: int = 0
    topics: set = dataclasses.field(default_factory=set)
    tenants: set = dataclasses.field(default_factory=set)
    schema_writes: int = 0  # each is a change record with no snap token in its answer
    statuses: dict = dataclasses.field(default_factory=dict)
    ok_routes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    nul_refused: collections.Counter = dataclasses.field(default_factory=collections.Counter)


async def client_request(http, url: str, fz: Fuzzer, acked: Acked, change_head: int) -> None:
    route = fz.rnd.choice(ROUTES)
    name = fz.name(route.names) if route.names else ""
    if route.method in ("PUT", "DELETE") and name in (TOPIC, TENANT):
        name = f"{RUN}-x1"  # the counted topic and tenant keep their configuration
    path = route.path.replace("{name}", name)
    headers = fz.headers()
    body = fz.body(route) if route.body is not None or fz.rnd.random() < 0.1 else None
    skip = [] if "Content-Type" in headers else ["Content-Type"]
    try:
        async with http.request(
            route.method,
            url + path,
            data=body,
            params=fz.query() if route.method == "GET" else None,
            headers=headers,
            skip_auto_headers=skip,
        ) as r:
            status, ctype = r.status, r.headers.get("Content-Type", "")
            streaming = ctype.startswith("text/event-stream") or route.path.endswith("}/watch")
            raw = b"" if streaming and status == 200 else await r.read()
            if streaming:
                r.close()
    except (aiohttp.InvalidURL, ValueError):
        return  # the client refused to send it (not a request the service saw)
    acked.statuses[status] = acked.statuses.get(status, 0) + 1
    acked.ok_routes[route.method + " " + route.path] += 200 <= status < 300
    if not 200 <= status < 300:
        check_error(status, ctype, raw, path)
        if b"NUL characters are not allowed" in raw:
            acked.nul_refused[route.method + " " + route.path] += 1
        return
    if not streaming:
        record_ack(acked, fz, route, name, raw, ctype, change_head)


def record_ack(
    acked: Acked, fz: Fuzzer, route: Route, name: str, raw: bytes, ctype: str, change_head: int
) -> None:
    """Remember what a 2xx acknowledged, to compare with what the database holds."""
    doc = orjson.loads(raw) if raw and ctype.startswith("application/json") else {}
    if route.path.endswith("/records") and route.method == "POST" and name == TOPIC:
        acked.records += doc["last_seq"] - doc["first_seq"] + 1
    elif route.path == "/v0/watch" and route.method == "POST":
        acked.sessions += 1
        fz.wids.append(doc["wid"])
    elif route.method == "PUT":
        acked.topics.add(name)
    elif route.path == "/v1/tenants/create":
        acked.tenants.add(doc["tenant"]["id"])
    elif route.path == "/v1/tenants/{name}" and route.method == "DELETE":
        acked.tenants.discard(name)
    if route.path.endswith("/schemas/write") and name == TENANT:
        acked.schema_writes += 1
    if "snap_token" in doc and name == TENANT:
        seq = pa.decode_token(pa.change_topic(TENANT), doc["snap_token"])
        if seq > change_head:
            acked.change_seqs.add(seq)


async def client_worker(http, url: str, seed: int, acked: Acked, change_head: int) -> None:
    fz = Fuzzer(seed)
    for _ in range(CLIENT_REQUESTS // WORKERS):
        async with asyncio.timeout(10):  # a hang is a failure, not a stuck suite
            await client_request(http, url, fz, acked, change_head)


async def raw_worker(port: int, seed: int, acked: Acked, change_head: int) -> int:
    """Send this worker's share of raw requests; how many got an answer."""
    fz, answered = Fuzzer(seed), 0
    for _ in range(RAW_REQUESTS // WORKERS):
        data, route, name = raw_request(fz)
        path = route.path.replace("{name}", name)
        stream = route.path.startswith("/v0/watch/") or route.path.endswith("}/watch")
        try:
            status, ctype, body = await send_raw(port, data, stream)
        except TimeoutError:
            raise AssertionError(f"no answer within 5 s to {data[:300]!r}") from None
        if status == 0:
            continue  # closed without an answer: allowed for garbage, never a 5xx
        answered += 1
        acked.statuses[status] = acked.statuses.get(status, 0) + 1
        if not 200 <= status < 300:
            check_error(status, ctype, body, path, echo_ok=False)
        elif not stream:
            record_ack(acked, fz, route, name, body, ctype, change_head)
    return answered


async def test_fuzz_every_route(fuzz_service, http, db):
    before = await snapshot(db)
    acked, head = Acked(), before["change_head"]
    # Seeded per worker; concurrent so the requests that wait out a read timeout overlap.
    await asyncio.gather(
        *(client_worker(http, fuzz_service.url, SEED + k, acked, head) for k in range(WORKERS))
    )
    answered = await asyncio.gather(
        *(raw_worker(fuzz_service.port, SEED + 100 + k, acked, head) for k in range(WORKERS))
    )
    after = await snapshot(db)
    print(f"fuzz: {CLIENT_REQUESTS} client + {RAW_REQUESTS} raw requests")
    print(f"fuzz: statuses {sorted(acked.statuses.items())}")
    print(f"fuzz: 2xx by route {dict(acked.ok_routes)}")
    print(f"fuzz: NUL refused (4xx) by route {dict(acked.nul_refused)}")
    print(f"fuzz: 5xx seen: {len(FIVE_XX)}")
    assert not FIVE_XX, f"{len(FIVE_XX)} x 5xx: {FIVE_XX[:10]}"
    assert sum(answered) > RAW_REQUESTS * 0.9
    assert after["head"] - before["head"] == after["rows"] - before["rows"] == acked.records
    # Every change record past the start was acknowledged: a schema write by its 2xx (its
    # answer has no snap token), any other by a snap token some answer carried.
    cur = await db.execute(
        "SELECT seq, data FROM records WHERE topic = %s AND seq > %s ORDER BY seq",
        (pa.change_topic(TENANT), before["change_head"]),
    )
    rows = [
        (seq, orjson.loads(data) if isinstance(data, str) else data)
        for seq, data in await cur.fetchall()
    ]
    assert len(rows) == after["change_head"] - before["change_head"]  # no hole, no partial write
    schema_rows = [seq for seq, data in rows if "schema" in data]
    assert len(schema_rows) == acked.schema_writes
    assert {seq for seq, _ in rows} - set(schema_rows) <= acked.change_seqs
    assert after["sessions"] - before["sessions"] == acked.sessions
    assert after["topics"] == before["topics"] | acked.topics
    assert after["tenants"] == acked.tenants
