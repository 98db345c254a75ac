"""Defects found by a black-box run (issues 11 and 12), each reproduced here: a snap token from
before its tenant was re-created, foreign writes to change topics, the history window of
existing tenants, attribute overwrites, names another dialect cannot represent, tenants listed
past a key's prefixes, NUL characters and an integer schema_version."""

from __future__ import annotations

import hashlib
import uuid

import orjson
import pytest

from watch_service.protocol import authz as pa
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import POOL

from .clients import PermifyWatch
from .test_permify_errors import grpc_error, post
from .test_permify_rest import SCHEMA

pytestmark = pytest.mark.service
BOOL = "type.googleapis.com/base.v1.BooleanValue"


def tenant_id(prefix: str = "dfx") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create(http, url: str, tenant: str) -> None:
    status, body = await post(http, f"{url}/v1/tenants/create", {"id": tenant})
    assert status == 200, body
    status, body = await post(http, f"{url}/v1/tenants/{tenant}/schemas/write", {"schema": SCHEMA})
    assert status == 200, body


def viewer(entity_id: str, subject: str = "u") -> dict:
    return {
        "entity": {"type": "document", "id": entity_id},
        "relation": "viewer",
        "subject": {"type": "user", "id": subject},
    }


def public(flag: object, kind: str = BOOL) -> dict:
    return {
        "entity": {"type": "document", "id": "1"},
        "attribute": "public",
        "value": {"@type": kind, "data": flag},
    }


async def test_token_from_before_the_tenant_was_recreated_is_refused(authz_service, http):
    url, tenant = authz_service.url, tenant_id()
    await create(http, url, tenant)
    _, written = await post(
        http, f"{url}/v1/tenants/{tenant}/relationships/write", {"tuples": [viewer("1")]}
    )
    async with http.delete(f"{url}/v1/tenants/{tenant}") as r:
        assert r.status == 200
    await create(http, url, tenant)  # same id: the tuple above is gone
    status, body = await post(
        http, f"{url}/v1/tenants/{tenant}/watch", {"snap_token": written["snap_token"]}
    )
    grpc_error(status, body, 3, 400)
    assert "deleted and created again" in body["message"]


async def test_topics_api_refuses_writes_to_change_topics(permify_api, authz_service, http):
    url, tenant = authz_service.url, tenant_id()
    await create(http, url, tenant)
    topic = f"{url}/v0/topics/{pa.change_topic(tenant)}"
    watch = await PermifyWatch(permify_api, tenant).open()
    try:
        for method, path, body in [
            ("POST", "/records", {"records": [{"data": "not a change record"}]}),
            ("PUT", "", {"ttl_ms": 1}),
            ("DELETE", "", None),
        ]:
            async with http.request(method, topic + path, json=body) as r:
                doc = await r.json()
                assert r.status == 403, doc
                assert doc["error"]["code"] and "authorization engine" in doc["error"]["message"]
        async with http.get(topic + "/records") as r:  # reading stays open
            assert r.status == 200
        _, written = await post(
            http, f"{url}/v1/tenants/{tenant}/relationships/write", {"tuples": [viewer("1")]}
        )
        [line] = await watch.lines(1)  # the watch was not wedged
        assert line.result.changes.snap_token == written["snap_token"]
    finally:
        watch.close()


async def test_history_window_applies_to_existing_tenants(authz_service, make_service, http):
    url, tenant = authz_service.url, tenant_id()
    await create(http, url, tenant)
    wider = 24 * 3600 * 1000 + 1  # wider than any test's window: nothing is trimmed
    await make_service(authz_history_ms=wider)  # start-up applies it to every tenant
    async with http.get(f"{url}/v0/topics/{pa.change_topic(tenant)}") as r:
        assert (await r.json())["ttl_ms"] == wider


async def test_attribute_overwrite_is_delete_then_create(permify_api, authz_service, http):
    url, tenant = authz_service.url, tenant_id()
    await create(http, url, tenant)
    write = f"{url}/v1/tenants/{tenant}/data/write"
    _, first = await post(http, write, {"attributes": [public(True)]})
    watch = await PermifyWatch(permify_api, tenant, snap_token=first["snap_token"]).open()
    try:
        _, same = await post(http, write, {"attributes": [public(True)]})
        assert same["snap_token"] == first["snap_token"]  # an unchanged value is no change
        _, second = await post(http, write, {"attributes": [public(False)]})
        [line] = await watch.lines(1)
    finally:
        watch.close()
    changes = line.result.changes
    assert changes.snap_token == second["snap_token"]
    assert [
        (c.operation.value, c.attribute.value.to_dict()["data"]) for c in changes.data_changes
    ] == [
        ("OPERATION_DELETE", True),
        ("OPERATION_CREATE", False),
    ]


async def test_names_permify_cannot_represent_end_the_watch_saying_so(
    permify_api, authz_service, http
):
    url, tenant = authz_service.url, tenant_id()
    await create(http, url, tenant)
    watch = await PermifyWatch(permify_api, tenant).open()
    try:
        # A SpiceDB-dialect write (types may hold '/', ids '|'): the engine path of that surface.
        spicedb_tuple = pa.Tuple("org/document", "1", "viewer", "user", "a|b")
        async with authz_service.app[POOL].connection() as conn:
            await db.apply(conn, tenant, "spicedb", db.Write([("touch", spicedb_tuple)]), 3600_000)
        _, after = await post(
            http, f"{url}/v1/tenants/{tenant}/relationships/write", {"tuples": [viewer("2")]}
        )
        [line] = await watch.lines(1)
    finally:
        watch.close()
    assert line.result is None and line.error.code == 9
    assert "org/document" in line.error.message and "Resume with snap_token" in line.error.message
    resume = line.error.message.split("Resume with snap_token '")[1].split("'")[0]
    again = await PermifyWatch(permify_api, tenant, snap_token=resume).open()
    try:
        [line] = await again.lines(1)  # the next representable change, nothing lost
    finally:
        again.close()
    assert line.result.changes.snap_token == after["snap_token"]


async def test_tenants_list_shows_only_the_keys_tenants(
    authz_service, make_service, tmp_path, http
):
    mine, other = tenant_id("mine"), tenant_id("other")
    for t in (mine, other):
        await create(http, authz_service.url, t)
    secret = "lister"
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "l"\nsecret_sha256 = "{hashlib.sha256(secret.encode()).hexdigest()}"\n'
        f'scopes = ["read"]\nprefixes = ["{pa.change_topic("mine-")}"]\n'
    )
    svc = await make_service(keys_file=keys)
    seen, token = [], ""
    while True:
        status, page = await post(
            http,
            f"{svc.url}/v1/tenants/list",
            {"page_size": 1, "continuous_token": token},
            {"Authorization": f"Bearer {secret}"},
        )
        assert status == 200, page
        seen += [t["id"] for t in page["tenants"]]
        token = page["continuous_token"]
        if not token:
            break
    assert mine in seen and other not in seen
    assert all(t.startswith("mine-") for t in seen)


async def test_nul_and_integer_schema_version_are_400s(authz_service, http):
    url, tenant = authz_service.url, tenant_id()
    await create(http, url, tenant)
    base = f"{url}/v1/tenants/{tenant}"
    async with http.get(f"{url}/v0/topics/{pa.change_topic(tenant)}") as r:
        head = (await r.json())["head_seq"]
    nul = "a\u0000b"
    for path, body in [
        ("/schemas/write", {"schema": f"entity {nul} {{}}"}),
        ("/data/write", {"attributes": [public(nul, "type.googleapis.com/base.v1.StringValue")]}),
        ("/data/write", {"tuples": [viewer(nul)]}),
        ("/data/relationships/read", {"filter": {"entity": {"type": "document", "ids": [nul]}}}),
        ("/data/relationships/read", {"continuous_token": nul}),
        ("/data/write", {"tuples": [viewer("1")], "metadata": {"schema_version": nul}}),
        ("/schemas/read", {"metadata": {"schema_version": nul}}),
        ("/schemas/read", {"metadata": {"schema_version": 7}}),
    ]:
        status, doc = await post(http, base + path, body)
        grpc_error(status, doc, 3, 400)
    status, doc = await post(http, f"{url}/v1/tenants/create", {"id": "nul-t", "name": nul})
    grpc_error(status, doc, 3, 400)
    raw = orjson.dumps({"schema": nul})
    status, doc = await post(http, base + "/schemas/write", raw)
    grpc_error(status, doc, 3, 400)
    async with http.get(f"{url}/v0/topics/{pa.change_topic(tenant)}") as r:
        assert (await r.json())["head_seq"] == head  # nothing written


async def test_rest_matches_permifys_gateway(authz_service, http):
    """Where the REST surface differed from Permify's gateway: unknown fields are ignored,
    empty write lists are allowed, 1,000 items per write, ``a,b``-style tenant ids
    (TenantCreateRequest ``[a-zA-Z0-9-,]+``) and one-letter relation names
    (``^[a-zA-Z_]{1,64}$``)."""
    url, tenant = authz_service.url, f"a,b-{uuid.uuid4().hex[:8]}"
    status, body = await post(http, f"{url}/v1/tenants/create", {"id": tenant, "extra": 1})
    assert status == 200, body
    schema = {"schema": "entity user {}\nentity document { relation x @user }", "extra": True}
    status, body = await post(http, f"{url}/v1/tenants/{tenant}/schemas/write", schema)
    assert status == 200, body
    status, empty = await post(http, f"{url}/v1/tenants/{tenant}/data/write", {"tuples": []})
    assert status == 200 and empty["snap_token"]
    many = [{**viewer(str(i)), "relation": "x"} for i in range(1000)]
    status, body = await post(http, f"{url}/v1/tenants/{tenant}/data/write", {"tuples": many})
    assert status == 200, body
    status, page = await post(http, f"{url}/v1/tenants/{tenant}/data/relationships/read", {})
    assert status == 200 and len(page["tuples"]) == 100 and page["continuous_token"]
