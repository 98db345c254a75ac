"""Every error code of the contract (but the SSE-only 406/429), produced for real and asserted
as the exact body ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import dataclasses

import orjson
import psycopg
import pytest

from tests.support import InProcessService, free_port, unique
from watch_service.web.auth import hash_secret

pytestmark = [pytest.mark.service, pytest.mark.pg]


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


async def call(http, method: str, url: str, **kw) -> tuple[int, dict]:
    async with http.request(method, url, **kw) as r:
        assert r.content_type == "application/json"
        return r.status, await r.json()


@pytest.fixture
async def start_service(base_settings):
    """Like ``make_service``, but pointed at any database URL."""
    started: list[InProcessService] = []

    async def start(db_url: str, **changes) -> InProcessService:
        svc = await InProcessService(dataclasses.replace(base_settings, **changes), db_url).start()
        started.append(svc)
        return svc

    yield start
    for svc in started:
        await svc.stop()


@pytest.fixture
async def keyed_service(make_service, tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "reader"\nsecret_sha256 = "{hash_secret("secret")}"\n'
        'scopes = ["read"]\nprefixes = ["ok-"]\n'
    )
    return await make_service(keys_file=keys)


JSON_TYPE = {"Content-Type": "application/json"}


async def test_400_invalid_request(service, http, topic_name):
    assert await call(
        http, "PUT", f"{service.url}/v0/topics/{topic_name}", json={"max_records": "ten"}
    ) == (400, error("invalid_request", "max_records: expected an integer, got string"))
    raw = b'{"records": [{"data": 1},'
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        detail = str(exc)
    await call(http, "PUT", f"{service.url}/v0/topics/{topic_name}", json={})
    assert await call(
        http, "POST", f"{service.url}/v0/topics/{topic_name}/records", data=raw, headers=JSON_TYPE
    ) == (
        400,
        error("invalid_request", f"body: malformed JSON ({detail})"),
    )


async def test_401_unauthorized(keyed_service, http):
    status, body = await call(http, "GET", f"{keyed_service.url}/v0/topics/ok-a")
    assert (status, body) == (
        401,
        error("unauthorized", "missing bearer key (Authorization: Bearer <key>)"),
    )
    async with http.get(f"{keyed_service.url}/v0/topics") as r:
        assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_403_forbidden(keyed_service, http):
    auth = {"Authorization": "Bearer secret"}
    assert await call(
        http, "PUT", f"{keyed_service.url}/v0/topics/ok-a", headers=auth, json={}
    ) == (403, error("forbidden", "key 'reader' lacks the 'admin' scope"))


async def test_404_topic_not_found(service, http, topic_name):
    assert await call(http, "GET", f"{service.url}/v0/topics/{topic_name}/records") == (
        404,
        error("topic_not_found", f"topic {topic_name!r} does not exist"),
    )


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/nope"),
        ("POST", "/v0/nope"),
        ("GET", "/v0/topics/a/b/c"),
        ("GET", "/v1/topics"),
    ],
)
async def test_404_not_found_unknown_route(service, http, method, path):
    assert await call(http, method, service.url + path) == (
        404,
        error("not_found", f"no route for {method} {path}"),
    )


async def test_405_method_not_allowed(service, http, topic_name):
    async with http.patch(f"{service.url}/v0/topics/{topic_name}", json={}) as r:
        assert r.status == 405
        assert await r.json() == error(
            "method_not_allowed", f"method PATCH is not allowed on /v0/topics/{topic_name}"
        )
        assert set(r.headers["Allow"].split(", ")) >= {"GET", "PUT", "DELETE"}
    assert await call(http, "DELETE", f"{service.url}/v0/topics/{topic_name}/records") == (
        405,
        error(
            "method_not_allowed", f"method DELETE is not allowed on /v0/topics/{topic_name}/records"
        ),
    )


async def test_413_payload_too_large(make_service, http, topic_name):
    svc = await make_service(max_body_bytes=1024)
    await call(http, "PUT", f"{svc.url}/v0/topics/{topic_name}", json={})
    body = orjson.dumps({"records": [{"data": "x" * 2000}]})
    assert await call(
        http, "POST", f"{svc.url}/v0/topics/{topic_name}/records", data=body, headers=JSON_TYPE
    ) == (
        413,
        error("payload_too_large", f"body of {len(body)} bytes is over the limit of 1024 bytes"),
    )


async def test_503_unavailable_when_postgres_is_unreachable(start_service, http, topic_name):
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/auditsync?connect_timeout=1"
    svc = await start_service(dead, pool_timeout_s=0.2)
    unavailable = (
        503,
        error("unavailable", "PostgreSQL is unreachable or misconfigured; retry later"),
    )
    assert await call(http, "GET", f"{svc.url}/v0/topics") == unavailable
    assert await call(http, "PUT", f"{svc.url}/v0/topics/{topic_name}", json={}) == unavailable
    assert (
        await call(
            http,
            "POST",
            f"{svc.url}/v0/topics/{topic_name}/records",
            json={"records": [{"data": 1}]},
        )
        == unavailable
    )
    status, body = await call(http, "GET", f"{svc.url}/readyz")
    assert status == 503 and body["error"]["code"] == "unavailable"
    assert await call(http, "GET", f"{svc.url}/healthz") == (200, {"status": "ok"})


async def test_500_internal_without_a_traceback(
    start_service, http, pg_cluster, pg_url, topic_name
):
    """A role that may connect but not read the tables: a real ProgrammingError, not a mock."""
    role = unique("noaccess").replace("-", "_")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute("INSERT INTO topics (name) VALUES (%s)", (topic_name,))
    svc = await start_service(
        f"postgresql://{role}@127.0.0.1:{pg_cluster.port}/auditsync", pool_timeout_s=2
    )
    internal = (500, error("internal", "internal server error"))
    assert await call(http, "GET", f"{svc.url}/v0/topics") == internal
    assert (
        await call(
            http,
            "POST",
            f"{svc.url}/v0/topics/{topic_name}/records",
            json={"records": [{"data": 1}]},
        )
        == internal
    )
    # the service keeps serving: the failed connection went back to the pool usable
    assert await call(http, "GET", f"{svc.url}/v0/topics/{topic_name}") == internal
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(
            "SELECT head_seq FROM topics WHERE name = %s", (topic_name,)
        ).fetchone() == (0,)
