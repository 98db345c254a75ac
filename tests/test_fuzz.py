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

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import json
import random

import aiohttp
import orjson
import pytest

from watch_service.protocol import authz as pa
from watch_service.web.auth import hash_secret

from .support import InProcessService, unique

pytestmark = [pytest.mark.service, pytest.mark.pg]

SEED = 11
CLIENT_REQUESTS = 4000
RAW_REQUESTS = 1000
WORKERS = 8
RUN = unique("fz")
TOPIC, TENANT = RUN, RUN  # the counted topic and tenant
RW, ADMIN = "fz-rw-secret", "fz-admin-secret"
MARKER = "ZQXJMARK"  # put into refused requests; must never come back
SCHEMA = "entity user {}\n\nentity doc {\n    relation viewer @user\n}\n"
REL = {
    "entity": {"type": "doc", "id": "d1"},
    "relation": "viewer",
    "subject": {"type": "user", "id": "u1"},
}
JUNK: list = [None, True, -1, 0, 10**30, 1.5, "", "\x00", "a\x00b", MARKER, "ü" * 300]
JUNK += [[], {}, [[[[[]]]]], {"$": None}, "x" * 5000]
DOC = {"entity": {"type": "doc"}}


@dataclasses.dataclass(frozen=True)
class Route:
    method: str
    path: str  # with {name}
    body: object  # a valid body template, or None for routes without one
    names: str  # "topic", "tenant", "wid" or "" (what {name} is)


ROUTES = [
    Route("PUT", "/v0/topics/{name}", {"max_records": 10, "ttl_ms": None}, "topic"),
    Route("GET", "/v0/topics", None, ""),
    Route("GET", "/v0/topics/{name}", None, "topic"),
    Route("DELETE", "/v0/topics/{name}", None, "topic"),
    Route(
        "POST",
        "/v0/topics/{name}/records",
        {"records": [{"data": {"a": 1}, "meta": {"m": 1}, "tag": "t", "node": "n"}]},
        "topic",
    ),
    Route("GET", "/v0/topics/{name}/records", None, "topic"),
    Route("POST", "/v0/watch", {"topics": {TOPIC: {"from_seq": 0}}}, ""),
    Route("GET", "/v0/watch/{name}", None, "wid"),
    Route("GET", "/healthz", None, ""),
    Route("GET", "/readyz", None, ""),
    Route("GET", "/metrics", None, ""),
    Route("POST", "/v1/tenants/create", {"id": "{new}", "name": "n"}, ""),
    Route("POST", "/v1/tenants/list", {"page_size": 10}, ""),
    Route("DELETE", "/v1/tenants/{name}", None, "tenant"),
    Route("POST", "/v1/tenants/{name}/schemas/write", {"schema": SCHEMA}, "tenant"),
    Route(
        "POST", "/v1/tenants/{name}/schemas/read", {"metadata": {"schema_version": ""}}, "tenant"
    ),
    Route("POST", "/v1/tenants/{name}/data/write", {"tuples": [REL]}, "tenant"),
    Route("POST", "/v1/tenants/{name}/relationships/write", {"tuples": [REL]}, "tenant"),
    Route("POST", "/v1/tenants/{name}/data/delete", {"tuple_filter": DOC}, "tenant"),
    Route("POST", "/v1/tenants/{name}/relationships/delete", {"filter": DOC}, "tenant"),
    Route(
        "POST",
        "/v1/tenants/{name}/data/relationships/read",
        {"filter": DOC, "page_size": 5},
        "tenant",
    ),
    Route("POST", "/v1/tenants/{name}/data/attributes/read", {"filter": DOC}, "tenant"),
    Route("POST", "/v1/tenants/{name}/watch", {"snap_token": ""}, "tenant"),
]
BAD_NAMES = ["", "%00", "a%00b", "..", "-x", "a b", "%ff%fe", "ü", "x" * 300, MARKER + "%0a"]


class Fuzzer:
    """Seeded request generator; remembers what the service acknowledged."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.n = 0
        self.wids: list[str] = []

    def name(self, kind: str) -> str:
        r = self.rnd.random()
        if kind == "wid":
            return self.rnd.choice(self.wids) if self.wids and r < 0.5 else self.bad_name()
        if r < 0.4:
            return TOPIC if kind == "topic" else TENANT
        if r < 0.7:
            self.n += 1
            return f"{RUN}-x{self.n % 20}"
        return self.bad_name()

    def bad_name(self) -> str:
        return self.rnd.choice(BAD_NAMES + [f"wid_{MARKER}", "wid_%00", "authz.t1"])

    def mutate(self, doc: object) -> object:
        """``doc`` with one random value replaced, a key added, or its type changed."""
        rnd = self.rnd
        if rnd.random() < 0.15 or not isinstance(doc, (dict, list)) or not doc:
            return rnd.choice(JUNK)
        doc = copy.deepcopy(doc)
        node = doc
        for _ in range(rnd.randrange(1, 5)):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            k = rnd.choice(keys)
            if isinstance(node[k], (dict, list)) and node[k] and rnd.random() < 0.6:
                node = node[k]
                continue
            if isinstance(node, dict) and rnd.random() < 0.2:
                node[MARKER] = 1
            else:
                node[k] = rnd.choice(JUNK)
            break
        return doc

    def body(self, route: Route) -> bytes:
        template = orjson.loads(orjson.dumps(route.body).replace(b"{new}", b"%s-x0" % RUN.encode()))
        r = self.rnd.random()
        if r < 0.25:
            raw = orjson.dumps(template)
        elif r < 0.6:
            raw = json.dumps(self.mutate(template), ensure_ascii=False).encode()  # big ints too
        elif r < 0.7:
            raw = orjson.dumps(template)
            raw = raw[: self.rnd.randrange(len(raw))]
        elif r < 0.8:
            raw = bytearray(orjson.dumps(template))
            for _ in range(3):
                raw[self.rnd.randrange(len(raw))] = self.rnd.choice(b'\x00\xff{}[]",:\\')
            raw = bytes(raw)
        elif r < 0.85:  # duplicate keys, deep nesting, non-UTF-8
            raw = self.rnd.choice(
                [b'{"records": [], "records": []}', b"[" * 5000 + b"]" * 5000, b'{"\xff": 1}']
            )
        elif r < 0.9:
            raw = b" " * 70_000  # over the fuzz service's 64 KiB body limit: 413
        else:
            raw = b""
        return raw

    def headers(self) -> dict[str, str]:
        r, rnd = self.rnd.random(), self.rnd
        auth = (
            f"Bearer {RW}"
            if r < 0.6
            else rnd.choice(
                [f"Bearer {ADMIN}", "", "Bearer", f"Bearer {MARKER}", "Basic eA==", "Bearer  ü"]
            )
        )
        ctype = rnd.choice(
            ["application/json"] * 6
            + [
                "text/plain",
                "application/x-www-form-urlencoded",
                "application/json; charset=utf-8",
                "",
                "x/\x7f",
            ]
        )
        out = {
            "Authorization": auth,
            "Content-Type": ctype,
            "Accept": rnd.choice(["text/event-stream", "*/*"]),
        }
        return {k: v for k, v in out.items() if v}

    def query(self) -> dict[str, str]:
        vals = ["0", "-1", "x", str(10**30), "", "\x00", "1e3", "5"]
        return {
            k: self.rnd.choice(vals)
            for k in ("from_seq", "limit", "token")
            if self.rnd.random() < 0.4
        }


# TODO(lead): empty this once helper "permify"'s branch is merged. Issue 11 item 2 gives the
# Permify body field checks to that helper: a NUL in a string field (filter ids, schema text…)
# or a non-string metadata.schema_version reaches SQL and answers 500 today. Those Permify
# body routes are listed and reported; nothing else (HTTP, watch, health, parser) may 5xx.
PERMIFY_OWNED = (
    "/schemas/read",
    "/schemas/write",
    "/data/write",
    "/relationships/write",
    "/data/delete",
    "/relationships/delete",
    "/data/relationships/read",
    "/data/attributes/read",
    "/watch",
)
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
    statuses: dict = dataclasses.field(default_factory=dict)
    ok_routes: collections.Counter = dataclasses.field(default_factory=collections.Counter)


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
    if "snap_token" in doc and name == TENANT:
        seq = pa.decode_token(pa.change_topic(TENANT), doc["snap_token"])
        if seq > change_head:
            acked.change_seqs.add(seq)


def raw_request(fz: Fuzzer) -> tuple[bytes, Route, str]:
    """One request aiohttp's client would not send: parser-level garbage; (bytes, route,
    name). Some of them aiohttp still accepts (then the route answers)."""
    rnd = fz.rnd
    route = rnd.choice([r for r in ROUTES if r.method not in ("PUT", "DELETE")])
    name = {"topic": TOPIC, "tenant": TENANT, "wid": "wid_x", "": ""}[route.names]
    path = route.path.replace("{name}", name)
    body = orjson.dumps(route.body) if route.body is not None else b""
    head = [
        "Host: x",
        "Connection: close",
        f"Authorization: Bearer {RW}",
        "Content-Type: application/json",
    ]
    method, version, extra = route.method, "HTTP/1.1", b""
    kind = rnd.randrange(12)
    if kind == 0:
        method = rnd.choice(["FOO", "G\x00T", MARKER, "GET\x7f", "PRI"])
    elif kind == 1:
        path = path + "/%00" if rnd.random() < 0.5 else path + "\x00" + MARKER
    elif kind == 2:
        head.append(f"X-Big: {MARKER}" + "a" * 65536)
    elif kind == 3:
        head += [f"X-H{i}: {MARKER}" for i in range(200)]
    elif kind == 4:
        head.append("Transfer-Encoding: chunked")
        body = rnd.choice(
            [b"zz\r\n" + MARKER.encode() + b"\r\n0\r\n\r\n", b"5\r\nab\r\n0\r\n\r\n", b"-1\r\n"]
        )
    elif kind == 5:
        head += [f"Content-Length: {len(body)}", f"Content-Length: {len(body) + 1}"]
    elif kind == 6:
        head += ["Content-Length: 5", "Transfer-Encoding: chunked"]
    elif kind == 7:
        extra = b"Authorization: Bearer \xff\xfe" + MARKER.encode() + b"\xc3\x28\r\n"
        head = [h for h in head if not h.startswith("Authorization")]
    elif kind == 8:
        version = rnd.choice(["HTTP/2.0", "HTTP/1.x", "HTTP/9.9", MARKER])
    elif kind == 9:
        head.append(f"{MARKER} no colon")
    elif kind == 10:
        head.append(f"X-Fold: a\r\n {MARKER}")
    else:
        head.append("Content-Length: " + rnd.choice(["-1", "1e3", "0x10", "99999999999999999999"]))
    if not any(h.startswith(("Content-Length", "Transfer-Encoding")) for h in head) and body:
        head.append(f"Content-Length: {len(body)}")
    first = f"{method} {path} {version}\r\n".encode("utf-8", "surrogateescape")
    data = first + "\r\n".join(head).encode() + b"\r\n" + extra + b"\r\n" + body
    return data, route, name


def dechunk(raw: bytes) -> bytes:
    out = b""
    while raw:
        size, _, raw = raw.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, raw = out + raw[:n], raw[n + 2 :]
    return out


async def send_raw(port: int, data: bytes, stream: bool) -> tuple[int, str, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            # Connection: close (or the error) ends the body; a 2xx watch is endless
            ok = head.split(b"\r\n")[0].split(b" ")[1:2] in ([b"200"], [b"201"])
            body = b"" if ok and stream else await reader.read(-1)
    except (ConnectionResetError, asyncio.IncompleteReadError):
        return 0, "", b""
    finally:
        writer.close()
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    if headers.get("Transfer-Encoding") == "chunked":
        body = dechunk(body)
    return status, headers.get("Content-Type", ""), body


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
    owned = [f for f in FIVE_XX if f[1].startswith("/v1/") and f[1].endswith(PERMIFY_OWNED)]
    print(f"fuzz: 5xx seen: {len(FIVE_XX)}, of which in Permify bodies (helper permify): {owned}")
    assert not [f for f in FIVE_XX if f not in owned], f"{len(FIVE_XX)} x 5xx: {FIVE_XX[:10]}"
    assert sum(answered) > RAW_REQUESTS * 0.9
    assert after["head"] - before["head"] == after["rows"] - before["rows"] == acked.records
    assert after["change_head"] - before["change_head"] == len(acked.change_seqs)
    assert after["sessions"] - before["sessions"] == acked.sessions
    assert after["topics"] == before["topics"] | acked.topics
    assert after["tenants"] == acked.tenants
