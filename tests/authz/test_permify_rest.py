"""The Permify REST surface through the official ``permify`` 1.7 client."""

from __future__ import annotations

import asyncio

import permify
import pytest
from permify.exceptions import NotFoundException

from ..support import unique
from .clients import PermifyWatch, bool_value, ptuple, seq_of

# The client's Any model declares additional_properties as Dict[str, <its own Any model>],
# so pydantic warns when serialising {"data": true}; the bytes sent are right.
pytestmark = [
    pytest.mark.service,
    pytest.mark.filterwarnings("ignore:Pydantic serializer warnings"),
]

SCHEMA = """
entity user {}
entity document {
    relation owner @user
    relation viewer @user @team#member
    attribute public boolean
    permission view = owner or viewer or public
}
entity team { relation member @user }
"""


def call(fn, *args, **kwargs):
    return asyncio.to_thread(fn, *args, **kwargs)


async def new_tenant(api: permify.ApiClient, schema: str | None = SCHEMA) -> str:
    """A new tenant with ``schema`` written (its change record is seq 1)."""
    tenant = unique("tn").replace("-", "_") + "+x@y.z:1"
    resp = await call(
        permify.TenancyApi(api).tenants_create,
        permify.TenantCreateRequest(id=tenant, name="test tenant"),
    )
    assert resp.tenant.id == tenant and resp.tenant.created_at is not None
    if schema is not None:
        await call(
            permify.SchemaApi(api).schemas_write, tenant, permify.SchemaWriteBody(var_schema=schema)
        )
    return tenant


async def test_tenancy_create_list_delete(permify_api):
    tenancy = permify.TenancyApi(permify_api)
    tenant = await new_tenant(permify_api)
    seen, token = [], None
    while True:  # pages of 2 through continuous_token
        page = await call(
            tenancy.tenants_list, permify.TenantListRequest(page_size=2, continuous_token=token)
        )
        seen += [t.id for t in page.tenants]
        token = page.continuous_token
        if not token:
            break
    assert "t1" in seen and tenant in seen and seen == sorted(seen)
    deleted = await call(tenancy.tenants_delete, tenant)
    assert deleted.tenant_id == tenant
    with pytest.raises(NotFoundException):
        await call(tenancy.tenants_delete, tenant)


async def test_schema_write_read(permify_api, authz_service, http):
    """Schema read answers Permify's gateway JSON (proto field names: ``entity_definitions``,
    which the 1.7 client's model misnames ``entityDefinitions``, so it is read raw here)."""
    tenant = await new_tenant(permify_api)
    schemas = permify.SchemaApi(permify_api)
    v1 = await call(schemas.schemas_write, tenant, permify.SchemaWriteBody(var_schema=SCHEMA))
    v2 = (
        await call(
            schemas.schemas_write, tenant, permify.SchemaWriteBody(var_schema="entity user {}")
        )
    ).schema_version
    url = f"{authz_service.url}/v1/tenants/{tenant}/schemas/read"
    async with http.post(url, json={}) as r:
        latest = (await r.json())["schema"]
    assert set(latest["entity_definitions"]) == {"user"}
    body = {"metadata": {"schema_version": v1.schema_version}}
    async with http.post(url, json=body) as r:
        old = (await r.json())["schema"]
    doc = old["entity_definitions"]["document"]
    assert set(doc["relations"]) == {"owner", "viewer"} and set(doc["permissions"]) == {"view"}
    assert doc["attributes"]["public"]["type"] == permify.AttributeType.ATTRIBUTE_TYPE_BOOLEAN
    assert v1.schema_version != v2


async def test_write_watch_delete_exactly_once_in_order(permify_api):
    data = permify.DataApi(permify_api)
    tenant = await new_tenant(permify_api)
    live = await PermifyWatch(permify_api, tenant).open()  # from now
    try:
        w1 = await call(
            data.data_write,
            tenant,
            permify.DataWriteBody(
                tuples=[
                    ptuple("document:1", "owner", "user:alice"),
                    ptuple("document:1", "viewer", "team:eng#member"),
                ],
                attributes=[
                    permify.Attribute(
                        entity=permify.Entity(type="document", id="1"),
                        attribute="public",
                        value=bool_value(True),
                    )
                ],
            ),
        )
        w2 = await call(
            data.relationships_write,
            tenant,
            permify.WriteRelationshipsBody(
                tuples=[ptuple("document:2", "viewer", "user:bob@example.com")]
            ),
        )
        again = await call(
            data.relationships_write,
            tenant,
            permify.WriteRelationshipsBody(
                tuples=[ptuple("document:2", "viewer", "user:bob@example.com")]
            ),
        )
        w3 = await call(
            data.relationships_delete,
            tenant,
            permify.DeleteRelationshipsBody(
                filter=permify.TupleFilter(
                    entity=permify.EntityFilter(type="document", ids=["1"]), relation="owner"
                )
            ),
        )
        w4 = await call(
            data.data_delete,
            tenant,
            permify.DataDeleteBody(
                tuple_filter=permify.TupleFilter(
                    entity=permify.EntityFilter(type="document", ids=["2"])
                ),
                attribute_filter=permify.AttributeFilter(
                    entity=permify.EntityFilter(type="document", ids=["1"]), attributes=["public"]
                ),
            ),
        )
        tokens = [w.snap_token for w in (w1, w2, w3, w4)]
        # Rewriting an existing tuple changes nothing: no record, the token stays put.
        assert again.snap_token == w2.snap_token
        assert [seq_of(tenant, t) for t in tokens] == list(range(2, 6))  # 1: the schema

        got = await live.lines(4)
        assert [r.result.changes.snap_token for r in got] == tokens
        ops = [
            [
                (c.operation.value, c.tuple.to_dict() if c.tuple else c.attribute.to_dict())
                for c in r.result.changes.data_changes
            ]
            for r in got
        ]
        assert ops[0] == [
            (
                "OPERATION_CREATE",
                {
                    "entity": {"type": "document", "id": "1"},
                    "relation": "owner",
                    "subject": {"type": "user", "id": "alice", "relation": ""},
                },
            ),
            (
                "OPERATION_CREATE",
                {
                    "entity": {"type": "document", "id": "1"},
                    "relation": "viewer",
                    "subject": {"type": "team", "id": "eng", "relation": "member"},
                },
            ),
            (
                "OPERATION_CREATE",
                {
                    "entity": {"type": "document", "id": "1"},
                    "attribute": "public",
                    "value": {"@type": "type.googleapis.com/base.v1.BooleanValue", "data": True},
                },
            ),
        ]
        assert ops[1][0][1]["subject"]["id"] == "bob@example.com"
        assert [op for op, _ in ops[2]] == ["OPERATION_DELETE"]
        assert ops[2][0][1]["relation"] == "owner"
        assert [op for op, _ in ops[3]] == ["OPERATION_DELETE", "OPERATION_DELETE"]
    finally:
        live.close()

    replay = await PermifyWatch(permify_api, tenant, snap_token=tokens[0]).open()
    try:
        got = await replay.lines(3)
        assert [r.result.changes.snap_token for r in got] == tokens[1:]
    finally:
        replay.close()


async def test_relationships_and_attributes_read(permify_api):
    data = permify.DataApi(permify_api)
    tenant = await new_tenant(permify_api)
    await call(
        data.data_write,
        tenant,
        permify.DataWriteBody(
            tuples=[ptuple(f"document:{i}", "viewer", "user:u") for i in range(5)],
            attributes=[
                permify.Attribute(
                    entity=permify.Entity(type="document", id=str(i)),
                    attribute="public",
                    value=bool_value(i % 2 == 0),
                )
                for i in range(3)
            ],
        ),
    )
    seen, token = [], None
    while True:
        page = await call(
            data.data_relationships_read,
            tenant,
            permify.ReadRelationshipsBody(
                filter=permify.TupleFilter(entity=permify.EntityFilter(type="document")),
                page_size=2,
                continuous_token=token,
            ),
        )
        seen += [t.entity.id for t in page.tuples]
        token = page.continuous_token
        if not token:
            break
    assert seen == ["0", "1", "2", "3", "4"]
    attrs = await call(
        data.data_attributes_read,
        tenant,
        permify.ReadAttributesBody(
            filter=permify.AttributeFilter(
                entity=permify.EntityFilter(type="document", ids=["0", "1"])
            )
        ),
    )
    assert [(a.entity.id, a.value.to_dict()["data"]) for a in attrs.attributes] == [
        ("0", True),
        ("1", False),
    ]
