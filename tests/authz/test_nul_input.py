"""A NUL character (U+0000) never reaches PostgreSQL, on any surface (issue 23, item 1): each
input family refuses it in one place with its contract's 4xx, never a 5xx, and writes nothing.

- HTTP request lines and headers (``web.nul_gate``): ``/v0/search?q=``, a topic read's query,
  a header, answered ``{"error": {"code": "invalid_request", ...}}``;
- Permify REST bodies and what their page tokens decode to (``compat.permify_json``);
- every gRPC message, Permify's and SpiceDB's (``compat.grpc_nul``): INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import base64

import grpc
import orjson
import pytest
from authzed.api.v1 import (
    DeleteRelationshipsRequest,
    ReadRelationshipsRequest,
    RelationshipFilter,
    WriteRelationshipsRequest,
)
from authzed.api.v1.permission_service_pb2 import ImportBulkRelationshipsRequest
from google.protobuf import any_pb2

from tests.web.fuzz_requests import send_raw
from watch_service.compat.proto import permify_base_v1_pb2 as pb
from watch_service.protocol import authz as pa

from .spicedb_support import Op, defined_type, rel, struct, update
from .test_permify_defects import create, tenant_id
from .test_permify_errors import post
from .test_permify_grpc import expect

pytestmark = pytest.mark.service
NUL = "a\x00b"


def token(*parts: str) -> str:
    """A page token as the Permify surface makes them, holding ``parts``."""
    return base64.urlsafe_b64encode(orjson.dumps(list(parts))).decode()


async def head(http, url: str, tenant: str) -> int:
    async with http.get(f"{url}/v0/topics/{pa.change_topic(tenant)}") as r:
        assert r.status == 200
        return (await r.json())["head_seq"]


async def test_nul_in_query_strings_and_headers_is_a_400(authz_service, http):
    url = authz_service.url
    for path, name in [
        ("/v0/search?q=a%00b", "q"),
        ("/v0/search?q=ab&cursor=%00", "cursor"),
        ("/v0/topics/anything/records?from_seq=%00", "from_seq"),
        ("/v0/topics?x%00=1", "x\x00"),
        ("/v1/tenants/list?token=a%00", "token"),
    ]:
        async with http.request("POST" if path.startswith("/v1") else "GET", url + path) as r:
            assert r.status == 400, path
            assert await r.json() == {
                "error": {
                    "code": "invalid_request",
                    "message": f"query parameter {name!r}: NUL characters are not allowed in "
                    "strings",
                }
            }, path
    # A write with a NUL in its query string writes nothing.
    topic = f"nul-{tenant_id('q')}"
    async with http.put(f"{url}/v0/topics/{topic}", json={}) as r:
        assert r.status == 201
    body = {"records": [{"data": 1}]}
    async with http.post(f"{url}/v0/topics/{topic}/records?x=a%00b", json=body) as r:
        assert (r.status, (await r.json())["error"]["code"]) == (400, "invalid_request")
    async with http.get(f"{url}/v0/topics/{topic}") as r:
        assert (await r.json())["head_seq"] == 0
    # A header value with a NUL, sent raw (clients refuse to): aiohttp's parser refuses it
    # (web/serving.py answers with the contract's body); the gate would, were it let through.
    raw = b"GET /v0/search?q=ab HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Id: a\x00b\r\n\r\n"
    status, ctype, raw_body = await send_raw(authz_service.port, raw, stream=False)
    assert (status, ctype.split(";")[0]) == (400, "application/json"), raw_body
    assert orjson.loads(raw_body)["error"]["code"] == "invalid_request"


async def test_nul_in_permify_rest_bodies_and_page_tokens_is_a_400(authz_service, http):
    url, tenant = authz_service.url, tenant_id("nul")
    await create(http, url, tenant)
    before = await head(http, url, tenant)
    base = f"{url}/v1/tenants/{tenant}"
    for path, body, field in [
        ("/data/relationships/read", {"continuous_token": token("d", NUL, "r", "u", "1", "")}, 1),
        ("/data/attributes/read", {"continuous_token": token("d", "1", NUL)}, 2),
    ]:
        status, doc = await post(http, base + path, body)
        assert (status, doc) == (
            400,
            {
                "code": 3,
                "message": f"continuous_token[{field}]: NUL characters are not allowed in strings",
                "details": [],
            },
        ), path
    tuples = [{"entity": {"type": "document", "id": NUL}, "relation": "viewer"}]
    status, doc = await post(http, base + "/data/write", {"tuples": tuples})
    assert (status, doc["code"], doc["message"]) == (
        400,
        3,
        "body.tuples[0].entity.id: NUL characters are not allowed in strings",
    )
    assert await head(http, url, tenant) == before  # nothing written


async def test_nul_in_a_permify_grpc_message_or_token_is_invalid_argument(permify_grpc, http):
    c, tenant = permify_grpc.c, tenant_id("nulg")
    await c.tenancy.Create(pb.TenantCreateRequest(id=tenant, name="n"))
    before = await head(http, permify_grpc.svc.url, tenant)
    read = c.data.ReadRelationships(
        pb.RelationshipReadRequest(tenant_id=tenant, continuous_token=token(*"dxrus", NUL))
    )
    assert await expect(grpc.StatusCode.INVALID_ARGUMENT, read) == (
        "continuous_token[5]: NUL characters are not allowed in strings"
    )
    value = any_pb2.Any()
    value.Pack(pb.StringValue(data=NUL))
    write = c.data.Write(
        pb.DataWriteRequest(
            tenant_id=tenant,
            attributes=[
                pb.Attribute(entity=pb.Entity(type="d", id="1"), attribute="a", value=value)
            ],
        )
    )
    assert await expect(grpc.StatusCode.INVALID_ARGUMENT, write) == (
        "request.attributes[0].value.data: NUL characters are not allowed in strings"
    )
    assert await head(http, permify_grpc.svc.url, tenant) == before


async def test_nul_in_a_spicedb_grpc_message_is_invalid_argument(authz_service, spicedb, http):
    doc = await defined_type(spicedb)
    before = await head(http, authz_service.url, "t1")
    msg = "NUL characters are not allowed in strings"
    calls = {
        "request.relationship_filter.optional_resource_id": lambda: list(
            spicedb.ReadRelationships(
                ReadRelationshipsRequest(
                    relationship_filter=RelationshipFilter(
                        resource_type=doc, optional_resource_id=NUL
                    )
                )
            )
        ),
        "request.relationship_filter.optional_resource_id_prefix": lambda: (
            spicedb.DeleteRelationships(
                DeleteRelationshipsRequest(
                    relationship_filter=RelationshipFilter(
                        resource_type=doc, optional_resource_id_prefix=NUL
                    )
                )
            )
        ),
        "request.optional_transaction_metadata.fields.k.string_value": lambda: (
            spicedb.WriteRelationships(
                WriteRelationshipsRequest(
                    updates=[update(Op.OPERATION_TOUCH, f"{doc}:1", "viewer", "user:u")],
                    optional_transaction_metadata=struct({"k": NUL}),
                )
            )
        ),
        "request.relationships[1].resource.object_id": lambda: spicedb.ImportBulkRelationships(
            iter(
                [
                    ImportBulkRelationshipsRequest(
                        relationships=[rel(f"{doc}:1", "viewer", "user:u")]
                    ),
                    ImportBulkRelationshipsRequest(
                        relationships=[
                            rel(f"{doc}:2", "viewer", "user:u"),
                            rel(f"{doc}:{NUL}", "viewer", "user:u"),
                        ]
                    ),
                ]
            )
        ),
    }
    for field, call in calls.items():
        with pytest.raises(grpc.RpcError) as err:
            await asyncio.to_thread(call)
        assert (err.value.code(), err.value.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{field}: {msg}",
        )
    assert await head(http, authz_service.url, "t1") == before  # nothing written


def test_the_gate_names_the_query_parameter_or_header_holding_a_nul():
    """``web.nul_gate`` on requests aiohttp's own parser would refuse first (a header)."""
    from aiohttp.test_utils import make_mocked_request

    from watch_service.web.nul_gate import nul_in_request

    assert nul_in_request(make_mocked_request("GET", "/v0/search?q=ab")) is None
    assert nul_in_request(make_mocked_request("GET", "/v0/search?q=a%00b")) == "query parameter 'q'"
    got = make_mocked_request("GET", "/v0/search?q=ab", headers={"X-Id": "a\x00b"})
    assert nul_in_request(got) == "header X-Id"
