"""Every error code of seed 000 from the Permify surface, in grpc-gateway shape, and bad input
that leaves nothing written."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from pathlib import Path

import permify
import psycopg
import pytest
from permify.exceptions import ApiException

from watch_service.protocol import authz as pa
from watch_service.protocol.requests import NewRecord
from watch_service.store import retention, topics
from watch_service.store.cluster import EmbeddedPostgres
from watch_service.store.migrate import migrate
from watch_service.web.app_keys import POOL

from ..support import InProcessService, free_port
from .clients import PermifyWatch
from .test_permify_rest import SCHEMA, call, new_tenant

pytestmark = pytest.mark.service


async def post(http, url: str, body, headers=None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else None
    if data is not None:  # raw bytes are still sent as JSON (else 415)
        headers = {"Content-Type": "application/json", **(headers or {})}
    async with http.post(url, json=None if data else body, data=data, headers=headers) as r:
        return r.status, await r.json()


def grpc_error(status: int, body: dict, code: int, http_status: int) -> None:
    assert (status, body["code"], body["details"]) == (http_status, code, []), body
    assert isinstance(body["message"], str) and body["message"]


def tuple_doc(entity_type: str = "document", entity_id: str = "1") -> dict:
    return {
        "entity": {"type": entity_type, "id": entity_id},
        "relation": "viewer",
        "subject": {"type": "user", "id": "u"},
    }


async def state(http, url: str, tenant: str) -> tuple:
    _, rels = await post(http, f"{url}/v1/tenants/{tenant}/data/relationships/read", {})
    async with http.get(f"{url}/v0/topics/{pa.change_topic(tenant)}") as r:
        head = (await r.json())["head_seq"]
    return rels["tuples"], head


async def test_invalid_argument_and_not_found_write_nothing(permify_api, authz_service, http):
    url, tenant = authz_service.url, await new_tenant(permify_api)
    await post(http, f"{url}/v1/tenants/{tenant}/relationships/write", {"tuples": [tuple_doc()]})
    before = await state(http, url, tenant)
    bad_bodies = [
        {"tuples": [tuple_doc(), tuple_doc("9document")]},  # malformed entity type
        {"tuples": [tuple_doc(entity_id="a b")]},  # malformed id
        {"tuples": [tuple_doc(entity_id=str(i)) for i in range(1001)]},  # over 1,000 items
        {"tuples": [{**tuple_doc(), "relation": "x1"}]},  # a digit in a relation name
        {"tuples": "nope"},
        {"tuples": [tuple_doc()], "metadata": {"schema_version": 1}},  # not a string
        {
            "attributes": [
                {
                    "entity": {"type": "document", "id": "1"},
                    "attribute": "public",
                    "value": {"@type": "type.googleapis.com/base.v1.BooleanValue", "data": "yes"},
                }
            ]
        },
    ]
    for body in bad_bodies:
        grpc_error(*await post(http, f"{url}/v1/tenants/{tenant}/data/write", body), 3, 400)
    grpc_error(*await post(http, f"{url}/v1/tenants/{tenant}/data/write", b"{not json"), 3, 400)
    grpc_error(
        *await post(http, f"{url}/v1/tenants/bad tenant!/data/write", {"tuples": [tuple_doc()]}),
        3,
        400,
    )
    grpc_error(*await post(http, f"{url}/v1/tenants/create", {"id": "x" * 129}), 3, 400)
    grpc_error(
        *await post(http, f"{url}/v1/tenants/no-such-tenant/data/write", {"tuples": [tuple_doc()]}),
        5,
        404,
    )
    grpc_error(*await post(http, f"{url}/v1/tenants/no-such-tenant/watch", {}), 5, 404)
    grpc_error(
        *await post(http, f"{url}/v1/tenants/{tenant}/watch", {"snap_token": "garbage"}), 3, 400
    )
    assert await state(http, url, tenant) == before
    with pytest.raises(ApiException) as err:  # the official client sees the same
        await call(
            permify.DataApi(permify_api).data_write,
            "no-such-tenant",
            permify.DataWriteBody(tuples=[permify.Tuple.from_dict(tuple_doc())]),
        )
    assert err.value.status == 404


async def test_oversized_body(make_service, permify_api, http):
    svc = await make_service(max_body_bytes=4096)
    tenant = await new_tenant(permify_api)
    huge = {"tuples": [tuple_doc(entity_id="x" * 120)] * 60}
    # 413 (issue 11): grpc-gateway has no status for it; RESOURCE_EXHAUSTED (8) in the body
    grpc_error(*await post(http, f"{svc.url}/v1/tenants/{tenant}/data/write", huge), 8, 413)
    assert await state(http, svc.url, tenant) == ([], 1)  # seq 1: the schema write


async def test_unauthenticated(make_service, tmp_path, http):
    secret = "permify-secret"
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "w"\nsecret_sha256 = "{hashlib.sha256(secret.encode()).hexdigest()}"\n'
        'scopes = ["read", "write"]\nprefixes = [""]\n'
    )
    svc = await make_service(keys_file=keys)
    body = {"tuples": [tuple_doc()]}
    status, _ = await post(
        http,
        f"{svc.url}/v1/tenants/t1/schemas/write",
        {"schema": SCHEMA},
        {"Authorization": f"Bearer {secret}"},
    )
    assert status == 200
    grpc_error(*await post(http, f"{svc.url}/v1/tenants/t1/relationships/write", body), 16, 401)
    grpc_error(
        *await post(http, f"{svc.url}/v1/tenants/t1/watch", {}, {"Authorization": "Bearer wrong"}),
        16,
        401,
    )
    grpc_error(
        *await post(
            http,
            f"{svc.url}/v1/tenants/create",
            {"id": "new"},
            {"Authorization": f"Bearer {secret}"},
        ),
        7,
        403,
    )  # lacks admin
    api = permify.ApiClient(
        permify.Configuration(host=svc.url),
        header_name="Authorization",
        header_value=f"Bearer {secret}",
    )
    resp = await call(
        permify.DataApi(api).relationships_write,
        "t1",
        permify.WriteRelationshipsBody(tuples=[permify.Tuple.from_dict(body["tuples"][0])]),
    )
    assert resp.snap_token


async def test_unavailable_when_watch_disabled(make_service, http):
    svc = await make_service(permify_watch_enabled=False)
    status, body = await post(http, f"{svc.url}/v1/tenants/t1/watch", {})
    grpc_error(status, body, 14, 503)
    assert "disabled" in body["message"]


async def test_unavailable_without_commit_timestamps(base_settings, http):
    base = Path(tempfile.mkdtemp(prefix="auditsync-nots-"))
    cluster = EmbeddedPostgres(base, free_port())
    try:
        url = await asyncio.to_thread(cluster.start)
        await asyncio.to_thread(migrate, url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET track_commit_timestamp = off")
        await asyncio.to_thread(cluster.stop)
        await asyncio.to_thread(cluster.start)
        svc = await InProcessService(base_settings, url).start()
        try:
            status, body = await post(http, f"{svc.url}/v1/tenants/t1/watch", {})
        finally:
            await svc.stop()
        grpc_error(status, body, 14, 503)
        assert "track_commit_timestamp is off" in body["message"]
    finally:
        await asyncio.to_thread(cluster.stop)
        shutil.rmtree(base, ignore_errors=True)


async def test_internal_error_is_the_final_stream_line(permify_api, authz_service, http):
    tenant = await new_tenant(permify_api)
    watch = await PermifyWatch(permify_api, tenant).open()
    try:
        # The topics API refuses this (test_permify_defects); a record that is not a change
        # record can only come from below the API, e.g. a restored or hand-edited database.
        async with authz_service.app[POOL].connection() as conn:
            foreign = NewRecord('"not a change record"', None, None, None)
            await topics.append(conn, pa.change_topic(tenant), [foreign])
        [line] = await watch.lines(1)
    finally:
        watch.close()
    assert line.result is None
    assert (line.error.code, line.error.message) == (13, "internal server error")


async def test_tenant_deleted_under_a_watch_ends_it_with_not_found(permify_api):
    tenant = await new_tenant(permify_api)
    watch = await PermifyWatch(permify_api, tenant).open()
    try:
        await call(permify.TenancyApi(permify_api).tenants_delete, tenant)
        [line] = await watch.lines(1)
    finally:
        watch.close()
    assert (line.error.code, line.error.message) == (5, "the tenant was deleted")


async def test_snap_token_before_the_history_window(permify_api, authz_service, http):
    tenant = await new_tenant(permify_api)
    url = f"{authz_service.url}/v1/tenants/{tenant}"
    _, first = await post(http, f"{url}/relationships/write", {"tuples": [tuple_doc()]})
    await post(http, f"{url}/relationships/write", {"tuples": [tuple_doc(entity_id="2")]})
    async with authz_service.app[POOL].connection() as conn:
        await retention.trim(conn, pa.change_topic(tenant), now_ms=2**62)
    status, body = await post(http, f"{url}/watch", {"snap_token": first["snap_token"]})
    grpc_error(status, body, 3, 400)
    assert "before the retained history" in body["message"]
