"""Permify's gRPC API (seed 000: "The Watch API only supports gRPC (port 3478)") with a client
built from the committed stubs: tenant, schema, data and the Watch from a snap token and from
now, across a service restart; every error code the seed lists."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import types
import uuid

import grpc
import pytest
from google.protobuf import any_pb2

from watch_service.compat.proto import permify_base_v1_pb2 as pb
from watch_service.compat.proto import permify_base_v1_pb2_grpc as pb_grpc
from watch_service.protocol import authz as pa
from watch_service.protocol.requests import NewRecord
from watch_service.store import topics
from watch_service.web.app_keys import POOL

from ..support import InProcessService, free_port
from .test_permify_rest import SCHEMA

pytestmark = pytest.mark.service
TIMEOUT = 10.0
Code = grpc.StatusCode


def client(port: int, key: str | None = None) -> types.SimpleNamespace:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return types.SimpleNamespace(
        channel=channel,
        tenancy=pb_grpc.TenancyStub(channel),
        schema=pb_grpc.SchemaStub(channel),
        data=pb_grpc.DataStub(channel),
        watch=pb_grpc.WatchStub(channel),
        md=(("authorization", f"Bearer {key}"),) if key else None,
    )


@pytest.fixture(scope="module")
async def permify_grpc(pg_url, base_settings):
    """The service with the Permify gRPC surface on, and a client; ``restart()`` replaces the
    service by a new one on the same ports."""
    settings = dataclasses.replace(base_settings, permify_grpc_port=free_port())
    box = types.SimpleNamespace(svc=await InProcessService(settings, pg_url).start())
    box.c = client(settings.permify_grpc_port)

    async def restart() -> None:
        await box.c.channel.close()
        await box.svc.stop()
        box.svc = await InProcessService(settings, pg_url).start()
        box.c = client(settings.permify_grpc_port)

    box.restart = restart
    yield box
    await box.c.channel.close()
    await box.svc.stop()


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


# Each row: what Permify answers (gRPC code, ErrorCode) and where its source says so.
# data_server.go = internal/servers/data_server.go (Write: HeadVersion, ReadEntityDefinition,
# ValidateTuple/ValidateAttribute); validation.go = internal/validation/validation.go;
# schema_reader.go = internal/storage/postgres/schema_reader.go; error.go =
# internal/servers/error.go (code ranges → gRPC status), at Permify commit e00d0522.
MATRIX = [
    # a tenant with no schema: HeadVersion finds no row (schema_reader.go)
    (
        "no schema",
        None,
        [tup("document:1", "viewer", "user:u")],
        [],
        Code.NOT_FOUND,
        "ERROR_CODE_SCHEMA_NOT_FOUND",
    ),
    # an entity type with no definition row for the version (schema_reader.go ReadEntityDefinition)
    (
        "unknown entity",
        SCHEMA,
        [tup("folder:1", "viewer", "user:u")],
        [],
        Code.NOT_FOUND,
        "ERROR_CODE_SCHEMA_NOT_FOUND",
    ),
    # GetRelationByNameInEntityDefinition (internal/schema/schema.go)
    (
        "unknown relation",
        SCHEMA,
        [tup("document:1", "editor", "user:u")],
        [],
        Code.NOT_FOUND,
        "ERROR_CODE_RELATION_DEFINITION_NOT_FOUND",
    ),
    # a permission is not a relation: writes name relations only
    (
        "write to a permission",
        SCHEMA,
        [tup("document:1", "view", "user:u")],
        [],
        Code.NOT_FOUND,
        "ERROR_CODE_RELATION_DEFINITION_NOT_FOUND",
    ),
    # pkg/tuple ValidateSubjectType: the subject type is not among the relation's @types
    (
        "disallowed subject type",
        SCHEMA,
        [tup("document:1", "owner", "team:eng")],
        [],
        Code.NOT_FOUND,
        "ERROR_CODE_SUBJECT_TYPE_NOT_FOUND",
    ),
    # ... nor is team without #member when only @team#member is allowed
    (
        "subject relation required",
        SCHEMA,
        [tup("document:1", "viewer", "team:eng")],
        [],
        Code.NOT_FOUND,
        "ERROR_CODE_SUBJECT_TYPE_NOT_FOUND",
    ),
    (
        "subject relation not allowed",
        SCHEMA,
        [tup("document:1", "owner", "user:u#member")],
        [],
        Code.NOT_FOUND,
        "ERROR_CODE_SUBJECT_TYPE_NOT_FOUND",
    ),
    # validation.go ValidateTuple: IsEntityAndSubjectEquals
    (
        "entity equals subject",
        "entity doc { relation self @doc#self }",
        [tup("doc:1", "self", "doc:1#self")],
        [],
        Code.INVALID_ARGUMENT,
        "ERROR_CODE_ENTITY_AND_SUBJECT_CANNOT_BE_EQUAL",
    ),
    # GetAttributeByNameInEntityDefinition
    (
        "unknown attribute",
        SCHEMA,
        [],
        [("secret", "BooleanValue", True)],
        Code.NOT_FOUND,
        "ERROR_CODE_ATTRIBUTE_DEFINITION_NOT_FOUND",
    ),
    # validation.go ValidateAttribute: TypeToString(def) != TypeUrlToString(value)
    (
        "attribute of the wrong type",
        SCHEMA,
        [],
        [("public", "StringValue", "yes")],
        Code.NOT_FOUND,
        "ERROR_CODE_ATTRIBUTE_TYPE_MISMATCH",
    ),
    (
        "valid",
        SCHEMA,
        [tup("document:1", "viewer", "team:eng#member")],
        [("public", "BooleanValue", False)],
        Code.OK,
        "",
    ),
]


def value(kind: str, data: object) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(getattr(pb, kind)(data=data))
    return out


@pytest.mark.parametrize("row", MATRIX, ids=[r[0] for r in MATRIX])
async def test_write_validation_matrix(permify_grpc, row):
    _, schema, tuples, attrs, code, error = row
    c = permify_grpc.c
    tenant = new_tenant_id()
    await c.tenancy.Create(pb.TenantCreateRequest(id=tenant))
    if schema is not None:
        await c.schema.Write(pb.SchemaWriteRequest(tenant_id=tenant, schema=schema))
    request = pb.DataWriteRequest(
        tenant_id=tenant,
        tuples=tuples,
        attributes=[
            pb.Attribute(entity=pb.Entity(type="document", id="1"), attribute=n, value=value(k, d))
            for n, k, d in attrs
        ],
    )
    if code == Code.OK:
        assert (await c.data.Write(request)).snap_token
        return
    assert (await expect(code, c.data.Write(request))).startswith(error)
    rels = await c.data.ReadRelationships(pb.RelationshipReadRequest(tenant_id=tenant))
    assert list(rels.tuples) == []  # nothing written


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("entity user {} entity user {}", "ERROR_CODE_DUPLICATED_ENTITY_REFERENCE"),
        ("entity doc { relation owner @nobody }", "ERROR_CODE_UNDEFINED_RELATION_REFERENCE"),
        ("entity doc { attribute x float }", "ERROR_CODE_INVALID_ARGUMENT"),
        ("entity doc { permission p = owner }", "ERROR_CODE_UNDEFINED_RELATION_REFERENCE"),
        ("entity doc { relation", "ERROR_CODE_SCHEMA_PARSE"),
        ("", "ERROR_CODE_SCHEMA_PARSE"),
    ],
)
async def test_schema_write_refuses_what_permify_cannot_compile(permify_grpc, text, error):
    c = permify_grpc.c
    tenant = new_tenant_id()
    await c.tenancy.Create(pb.TenantCreateRequest(id=tenant))
    write = c.schema.Write(pb.SchemaWriteRequest(tenant_id=tenant, schema=text))
    assert (await expect(Code.INVALID_ARGUMENT, write)).startswith(error)
    await expect(Code.NOT_FOUND, c.schema.Read(pb.SchemaReadRequest(tenant_id=tenant)))


async def test_nul_in_a_grpc_string_is_invalid_argument(permify_grpc):
    c = permify_grpc.c
    create = c.tenancy.Create(pb.TenantCreateRequest(id=new_tenant_id(), name="a\x00b"))
    assert "NUL" in await expect(Code.INVALID_ARGUMENT, create)
