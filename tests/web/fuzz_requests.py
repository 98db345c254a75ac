"""The fuzz test's requests, seeded: route templates, a ``Fuzzer`` that mutates names,
bodies, headers and queries, and raw requests aiohttp's client would not send (parser-level
garbage), sent over a plain asyncio stream. ``tests/web/test_fuzz.py`` sends them and checks the
answers."""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import json
import random

import orjson

from tests.support import unique

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


def page_token(*parts: str) -> str:
    """A Permify page token of ``parts`` (what the service's tokens look like)."""
    return base64.urlsafe_b64encode(orjson.dumps(list(parts))).decode()


JUNK: list = [None, True, -1, 0, 10**30, 1.5, "", "\x00", "a\x00b", MARKER, "ü" * 300]
JUNK += [[], {}, [[[[[]]]]], {"$": None}, "x" * 5000]
# page tokens that decode to text with a NUL (relationship and attribute reads)
JUNK += [page_token("doc", "a\x00b", "viewer", "user", "u1", ""), page_token("doc", "d1", "\x00")]
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
    Route("GET", "/v0/search", None, ""),
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
        {"filter": DOC, "page_size": 5, "continuous_token": ""},
        "tenant",
    ),
    Route(
        "POST",
        "/v1/tenants/{name}/data/attributes/read",
        {"filter": DOC, "continuous_token": ""},
        "tenant",
    ),
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
        vals = ["0", "-1", "x", str(10**30), "", "\x00", "a\x00b", "1e3", "5"]
        return {
            k: self.rnd.choice(vals)
            for k in ("from_seq", "limit", "token", "q", "cursor")
            if self.rnd.random() < 0.4
        }


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
