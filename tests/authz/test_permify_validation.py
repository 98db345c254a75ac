"""Permify's write validation and schema compilation over its gRPC API, each row checked
against what Permify answers (its source cited per row), and NUL characters refused."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2

from watch_service.compat.proto import permify_base_v1_pb2 as pb

from .test_permify_grpc import expect, new_tenant_id, tup
from .test_permify_rest import SCHEMA

pytestmark = pytest.mark.service
Code = grpc.StatusCode


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
