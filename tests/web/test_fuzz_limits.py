"""The named hostile inputs of issue 11, each once over a raw socket: aiohttp's own parser
errors answer the contract's JSON body without echoing the request; a header or body that
does not arrive in time is 408 and the socket is freed; a non-UTF-8 bearer key is 401 on every
route; a NUL in a watch id is 404."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from watch_service.web.auth import hash_secret

from .fuzz_requests import MARKER, dechunk, send_raw

pytestmark = [pytest.mark.service, pytest.mark.pg]

HEAD = "Host: x\r\nConnection: close\r\n"
PARSER_CASES = {
    "64 KiB header": f"GET /healthz HTTP/1.1\r\n{HEAD}X-Big: {MARKER}{'a' * 65536}\r\n\r\n",
    "200 headers": "GET /healthz HTTP/1.1\r\n"
    + HEAD
    + "".join(f"X-{i}: {MARKER}\r\n" for i in range(200))
    + "\r\n",
    "NUL in path": f"GET /v0/topics/a\x00{MARKER} HTTP/1.1\r\n{HEAD}\r\n",
    "bad chunking": f"POST /v0/watch HTTP/1.1\r\n{HEAD}Content-Type: application/json\r\n"
    f"Transfer-Encoding: chunked\r\n\r\nzz{MARKER}\r\n",
    "conflicting Content-Length": f"POST /v0/watch HTTP/1.1\r\n{HEAD}Content-Length: 2\r\n"
    f"Content-Length: 3\r\n\r\n{{}}",
    "unknown method": f"{MARKER} /healthz HTTP/1.1\r\n{HEAD}\r\n",
}


@pytest.mark.parametrize("case", PARSER_CASES)
async def test_parser_errors_answer_the_contract_body(service, case):
    status, ctype, body = await send_raw(service.port, PARSER_CASES[case].encode(), False)
    assert 400 <= status < 500 and ctype == "application/json", (status, ctype, body)
    doc = orjson.loads(body)
    assert set(doc) == {"error"} and doc["error"]["code"] == "invalid_request", doc
    assert MARKER not in doc["error"]["message"]


async def read_all(reader: asyncio.StreamReader, timeout: float) -> tuple[bytes, float]:
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        data = await reader.read(-1)
    return data, time.monotonic() - started


async def test_half_sent_header_is_408_and_the_socket_is_freed(make_service):
    svc = await make_service(header_timeout_s=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    for _ in range(5):  # a slow trickle does not extend the deadline
        await asyncio.sleep(0.05)
        writer.write(b"X-Slow: 1\r\n")
    data, waited = await read_all(reader, 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"application/json" in head, data
    assert orjson.loads(body)["error"]["code"] == "request_timeout"
    assert waited < 2


async def test_half_sent_body_is_408(make_service, topic_name):
    svc = await make_service(body_timeout_s=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
    writer.write(
        f"PUT /v0/topics/{topic_name} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{".encode()
    )
    data, _ = await read_all(reader, 15)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), data
    if b"chunked" in head:
        body = dechunk(body)
    assert orjson.loads(body)["error"]["code"] == "request_timeout"


async def test_idle_keepalive_connection_is_closed(make_service):
    svc = await make_service(keepalive_timeout_s=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data, _ = await read_all(reader, 5)  # EOF once the idle connection is closed
    writer.close()
    assert data.startswith(b"HTTP/1.1 200 ")


ROUTES = [
    "GET /v0/topics",
    "GET /v0/topics/t",
    "PUT /v0/topics/t",
    "DELETE /v0/topics/t",
    "POST /v0/topics/t/records",
    "GET /v0/topics/t/records",
    "POST /v0/watch",
    "POST /v1/tenants/create",
    "POST /v1/tenants/t1/data/write",
    "POST /v1/tenants/t1/watch",
]


async def test_non_utf8_bearer_key_is_401_on_every_route(make_service, tmp_path, topic_name):
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "k"\nsecret_sha256 = "{hash_secret("s")}"\nscopes = ["read", "admin"]\n'
    )
    svc = await make_service(keys_file=keys)
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer s"}) as http:
        async with http.put(f"{svc.url}/v0/topics/{topic_name}", json={}) as r:
            assert r.status in (200, 201)
        body = {"topics": {topic_name: {"from_seq": 0}}}
        async with http.post(f"{svc.url}/v0/watch", json=body) as r:
            wid = (await r.json())["wid"]  # a real session: its key check hashes the header
    for route in [*ROUTES, f"GET /v0/watch/{wid}"]:
        raw = (
            f"{route} HTTP/1.1\r\n{HEAD}Content-Type: application/json\r\n".encode()
            + b"Authorization: Bearer \xff\xfe\xc3\x28\r\nContent-Length: 2\r\n\r\n{}"
        )
        status, ctype, body = await send_raw(svc.port, raw, False)
        doc = orjson.loads(body)
        assert status == 401 and ctype == "application/json", (route, status, body)
        assert doc.get("error", {}).get("code") == "unauthorized" or doc.get("code") == 16, doc


async def test_nul_in_a_watch_id_is_404(service):
    raw = f"GET /v0/watch/%00 HTTP/1.1\r\n{HEAD}Accept: text/event-stream\r\n\r\n".encode()
    status, _, body = await send_raw(service.port, raw, False)
    assert (status, orjson.loads(body)["error"]["code"]) == (404, "not_found"), body
