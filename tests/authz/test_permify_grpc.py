"""Permify's gRPC API (seed 000: "The Watch API only supports gRPC (port 3478)") with a client
built from the committed stubs: tenant, schema, data and the Watch from a snap token and from
now, across a service restart; every error code the seed lists."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import grpc
import pytest
from google.protobuf import any_pb2

from watch_service.compat.proto import permify_base_v1_pb2 as pb
from watch_service.protocol import authz as pa
from watch_service.protocol.requests import NewRecord
from watch_service.store import topics
from watch_service.web.app_keys import POOL

from ..support import free_port
from .clients import permify_grpc_client as client
from .test_permify_rest import SCHEMA

pytestmark = pytest.mark.service
TIMEOUT = 10.0
Code = grpc.StatusCode


def new_tenant_id() -> str:
    return f"grpc-{uuid.uuid4().hex[:12]}"


def tup(entity: str, relation: str, subject: str) -> pb.Tuple:
    et, eid = entity.split(":", 1)
    st, sid = subject.split(":", 1)
    sid, _, srel = sid.partition("#")
    return pb.Tuple(
        entity=pb.Entity(type=et, id=eid),
        relation=relation,
        subject=pb.Subject(type=st, id=sid, relation=srel),
    )


def boolean(flag: bool) -> any_pb2.Any:
    value = any_pb2.Any()
    value.Pack(pb.BooleanValue(data=flag))
    return value


async def watch_open(c, tenant: str, snap_token: str = ""):
    call = c.watch.Watch(pb.WatchRequest(tenant_id=tenant, snap_token=snap_token), metadata=c.md)
    await asyncio.wait_for(call.initial_metadata(), TIMEOUT)  # anchored: no change is missed
    return call


async def next_changes(call) -> pb.DataChanges:
    resp = await asyncio.wait_for(call.read(), TIMEOUT)
    assert resp is not grpc.aio.EOF
    return resp.changes


async def create_with_schema(c, tenant: str) -> str:
    resp = await c.tenancy.Create(pb.TenantCreateRequest(id=tenant, name="grpc"), metadata=c.md)
    assert resp.tenant.id == tenant and resp.tenant.created_at.seconds > 0
    written = await c.schema.Write(pb.SchemaWriteRequest(tenant_id=tenant, schema=SCHEMA))
    return written.schema_version


async def test_client_round_trip_across_a_restart(permify_grpc):
    c = permify_grpc.c
    tenant = new_tenant_id()
    version = await create_with_schema(c, tenant)
    read = await c.schema.Read(pb.SchemaReadRequest(tenant_id=tenant))
    viewer = read.schema.entity_definitions["document"].relations["viewer"]
    assert [(r.type, r.relation) for r in viewer.relation_references] == [
        ("user", ""),
        ("team", "member"),
    ]
    attr = read.schema.entity_definitions["document"].attributes["public"]
    assert attr.type == pb.ATTRIBUTE_TYPE_BOOLEAN
    listed = await c.schema.List(pb.SchemaListRequest(tenant_id=tenant))
    assert listed.head == version and [s.version for s in listed.schemas] == [version]

    live = await watch_open(c, tenant)  # from now
    w1 = await c.data.Write(
        pb.DataWriteRequest(
            tenant_id=tenant,
            metadata=pb.DataWriteRequestMetadata(),
            tuples=[
                tup("document:1", "owner", "user:alice"),
                tup("document:1", "viewer", "team:eng#member"),
            ],
            attributes=[
                pb.Attribute(
                    entity=pb.Entity(type="document", id="1"),
                    attribute="public",
                    value=boolean(True),
                )
            ],
        )
    )
    got = await next_changes(live)
    assert got.snap_token == w1.snap_token
    assert [c.operation for c in got.data_changes] == [pb.DataChange.OPERATION_CREATE] * 3
    assert got.data_changes[1].tuple.subject == pb.Subject(type="team", id="eng", relation="member")
    flag = pb.BooleanValue()
    assert got.data_changes[2].attribute.value.Unpack(flag) and flag.data is True
    w2 = await c.data.WriteRelationships(
        pb.RelationshipWriteRequest(
            tenant_id=tenant, tuples=[tup("document:2", "viewer", "user:bob")]
        )
    )
    w3 = await c.data.DeleteRelationships(
        pb.RelationshipDeleteRequest(
            tenant_id=tenant,
            filter=pb.TupleFilter(
                entity=pb.EntityFilter(type="document", ids=["1"]), relation="owner"
            ),
        )
    )
    assert [(await next_changes(live)).snap_token for _ in range(2)] == [
        w2.snap_token,
        w3.snap_token,
    ]
    live.cancel()
    rels = await c.data.ReadRelationships(
        pb.RelationshipReadRequest(tenant_id=tenant, filter=pb.TupleFilter(), page_size=1)
    )
    assert len(rels.tuples) == 1 and rels.continuous_token
    attrs = await c.data.ReadAttributes(pb.AttributeReadRequest(tenant_id=tenant))
    assert [a.attribute for a in attrs.attributes] == ["public"]

    await permify_grpc.restart()
    c2 = permify_grpc.c
    replay = await watch_open(c2, tenant, w1.snap_token)
    assert [(await next_changes(replay)).snap_token for _ in range(2)] == [
        w2.snap_token,
        w3.snap_token,
    ]
    live2 = await watch_open(c2, tenant)
    w4 = await c2.data.Delete(
        pb.DataDeleteRequest(
            tenant_id=tenant,
            tuple_filter=pb.TupleFilter(entity=pb.EntityFilter(type="document", ids=["2"])),
            attribute_filter=pb.AttributeFilter(),
        )
    )
    for call in (replay, live2):
        got = await next_changes(call)
        assert got.snap_token == w4.snap_token
        assert got.data_changes[0].operation == pb.DataChange.OPERATION_DELETE
        call.cancel()
    deleted = await c2.tenancy.Delete(pb.TenantDeleteRequest(id=tenant))
    assert deleted.tenant_id == tenant


async def expect(code: grpc.StatusCode, coro) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    assert err.value.code() == code, err.value.details()
    return err.value.details() or ""


async def first_message(call):
    return await asyncio.wait_for(call.read(), TIMEOUT)


async def test_every_seed_error_code(permify_grpc, make_service, tmp_path):
    svc, c = permify_grpc.svc, permify_grpc.c
    # INVALID_ARGUMENT: a malformed tenant id, a token not from this service
    await expect(
        Code.INVALID_ARGUMENT,
        first_message(c.watch.Watch(pb.WatchRequest(tenant_id="bad tenant!"))),
    )
    tenant = new_tenant_id()
    await create_with_schema(c, tenant)
    request = pb.WatchRequest(tenant_id=tenant, snap_token="garbage")
    await expect(Code.INVALID_ARGUMENT, first_message(c.watch.Watch(request)))
    # NOT_FOUND: the tenant
    missing = pb.WatchRequest(tenant_id="no-such-tenant")
    assert "TENANT_NOT_FOUND" in await expect(Code.NOT_FOUND, first_message(c.watch.Watch(missing)))
    # INTERNAL: a record in the change topic that is not a change record (written from below
    # the API: the topics API refuses it)
    watch = await watch_open(c, tenant)
    async with svc.app[POOL].connection() as conn:
        foreign = NewRecord('"not a change record"', None, None, None)
        await topics.append(conn, pa.change_topic(tenant), [foreign])
    assert await expect(Code.INTERNAL, first_message(watch)) == "internal server error"
    # UNIMPLEMENTED, saying why, for the rest of Permify's API
    check = c.channel.unary_unary("/base.v1.Permission/Check")
    assert "change-stream service" in await expect(Code.UNIMPLEMENTED, check(b""))

    # UNAUTHENTICATED (preshared key as authorization: Bearer) and UNAVAILABLE (watch disabled)
    secret = "permify-grpc-secret"
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nid = "r"\nsecret_sha256 = "{hashlib.sha256(secret.encode()).hexdigest()}"\n'
        'scopes = ["read"]\nprefixes = [""]\n'
    )
    port = free_port()
    await make_service(keys_file=keys, permify_grpc_port=port, permify_watch_enabled=False)
    anon, wrong, reader = client(port), client(port, "wrong"), client(port, secret)
    try:
        request = pb.WatchRequest(tenant_id=tenant)
        await expect(Code.UNAUTHENTICATED, first_message(anon.watch.Watch(request)))
        await expect(
            Code.UNAUTHENTICATED, first_message(wrong.watch.Watch(request, metadata=wrong.md))
        )
        assert "disabled" in await expect(
            Code.UNAVAILABLE, first_message(reader.watch.Watch(request, metadata=reader.md))
        )
        write = pb.SchemaWriteRequest(tenant_id=tenant, schema="entity user {}")
        await expect(Code.PERMISSION_DENIED, reader.schema.Write(write, metadata=reader.md))
    finally:
        for x in (anon, wrong, reader):
            await x.channel.close()
