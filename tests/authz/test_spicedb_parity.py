"""Parity with the real SpiceDB where a black-box run found us different (issue 12, item 4):
auth codes, the bearer scheme's case, limited deletes, no-op TOUCHes, one response per
revision, ReadRelationships' consistency, ErrorInfo details, tokens from before a tenant was
deleted and re-created, and the calls this change-stream service does not serve.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import grpc
import pytest
from authzed.api.v1 import (
    CheckPermissionRequest,
    Consistency,
    DeleteRelationshipsRequest,
    InsecureClient,
    ObjectReference,
    ReadRelationshipsRequest,
    RelationshipFilter,
    SubjectReference,
    WatchRequest,
    WriteRelationshipsRequest,
    ZedToken,
)
from authzed.api.v1.permission_service_pb2_grpc import PermissionsServiceStub
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from watch_service.protocol import authz as pa
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import POOL

from ..support import InProcessService, free_port
from .clients import GRPC_KEY
from .spicedb_support import Op, WatchReader, defined_type, text, update, write

pytestmark = pytest.mark.service


def error_info(exc: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(exc)
    info = error_details_pb2.ErrorInfo()
    assert status is not None and status.details[0].Unpack(info)
    return info


async def test_bearer_scheme_in_any_case(spicedb, make_service):
    doc = await defined_type(spicedb)
    port = free_port()  # a service with a key: the shared authz_service is in dev mode
    await make_service(grpc_port=port, grpc_key=GRPC_KEY)
    stub = PermissionsServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    for scheme in ("bearer", "BEARER", "Bearer"):
        req = WriteRelationshipsRequest(
            updates=[update(Op.OPERATION_TOUCH, f"{doc}:{scheme}", "owner", "user:a")]
        )
        resp = await asyncio.to_thread(
            stub.WriteRelationships, req, metadata=[("authorization", f"{scheme} {GRPC_KEY}")]
        )
        assert resp.written_at.token
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(
            stub.WriteRelationships, req, metadata=[("authorization", f"Basic {GRPC_KEY}")]
        )
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_limited_delete_without_partial_is_invalid_argument(spicedb):
    doc = await defined_type(spicedb)
    await write(
        spicedb, *[update(Op.OPERATION_TOUCH, f"{doc}:{i}", "owner", "user:a") for i in range(3)]
    )
    req = DeleteRelationshipsRequest(
        relationship_filter=RelationshipFilter(resource_type=doc), optional_limit=2
    )
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(spicedb.DeleteRelationships, req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        "found more than 2 relationships to be deleted and partial deletion was not requested"
    )
    reason = "ERROR_REASON_TOO_MANY_RELATIONSHIPS_FOR_TRANSACTIONAL_DELETE"
    assert error_info(err.value).reason == reason
    req.optional_allow_partial_deletions = True
    resp = await asyncio.to_thread(spicedb.DeleteRelationships, req)
    assert resp.relationships_deleted_count == 2


async def test_noop_touch_is_no_event_and_a_revision_is_one_response(spicedb):
    doc = await defined_type(spicedb)
    start = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:a", "owner", "user:a"))
    watch = WatchReader(
        spicedb, WatchRequest(optional_start_cursor=start.written_at, optional_object_types=[doc])
    )
    try:
        await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:a", "owner", "user:a"))  # no-op
        await write(
            spicedb,
            *[update(Op.OPERATION_TOUCH, f"{doc}:{i}", "viewer", "user:v") for i in range(1000)],
        )
        await write(
            spicedb,
            *[update(Op.OPERATION_TOUCH, f"{doc}:{i}", "owner", "user:o") for i in range(300)],
        )
        deleted = await asyncio.to_thread(
            spicedb.DeleteRelationships,
            DeleteRelationshipsRequest(relationship_filter=RelationshipFilter(resource_type=doc)),
        )
        got = await watch.take(3)
    finally:
        watch.close()
    assert [len(r.updates) for r in got] == [1000, 300, 1301]  # the no-op touch sent nothing
    assert got[2].changes_through.token == deleted.deleted_at.token
    assert f"{doc}:a#owner@user:a" in {text(u) for u in got[2].updates}


async def test_read_consistency_is_honoured_or_refused(spicedb):
    doc = await defined_type(spicedb)
    w = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:1", "owner", "user:a"))
    f = RelationshipFilter(resource_type=doc)

    def read(consistency: Consistency) -> list:
        return list(
            spicedb.ReadRelationships(
                ReadRelationshipsRequest(relationship_filter=f, consistency=consistency)
            )
        )

    for ok in (
        Consistency(minimize_latency=True),
        Consistency(fully_consistent=True),
        Consistency(at_least_as_fresh=w.written_at),
    ):
        assert len(await asyncio.to_thread(read, ok)) == 1
    seq = pa.decode_token(pa.change_topic("t1"), w.written_at.token)
    ahead = ZedToken(token=pa.encode_token(pa.change_topic("t1"), seq + 10**9))
    other = ZedToken(token=pa.encode_token(pa.change_topic("another"), seq))
    for bad, code, words in (
        (Consistency(at_least_as_fresh=ahead), "INVALID_ARGUMENT", "ahead"),
        (Consistency(at_least_as_fresh=other), "INVALID_ARGUMENT", "different tenant"),
        (Consistency(at_exact_snapshot=w.written_at), "FAILED_PRECONDITION", "not supported"),
    ):
        with pytest.raises(grpc.RpcError) as err:
            await asyncio.to_thread(read, bad)
        assert err.value.code().name == code
        assert words in err.value.details()


async def test_write_errors_carry_error_info(spicedb):
    doc = await defined_type(spicedb)
    with pytest.raises(grpc.RpcError) as err:
        await write(spicedb, update(Op.OPERATION_TOUCH, "nodef_xyz:1", "owner", "user:a"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = error_info(err.value)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "ERROR_REASON_UNKNOWN_DEFINITION",
        "authzed.com",
        {"definition_name": "nodef_xyz"},
    )
    with pytest.raises(grpc.RpcError) as err:
        await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:1", "view", "user:a"))
    assert error_info(err.value).reason == "ERROR_REASON_CANNOT_UPDATE_PERMISSION"


async def test_token_from_before_tenant_recreate_is_out_of_range(pg_url, base_settings, service):
    tenant = f"recreate-{uuid.uuid4().hex[:8]}"
    pool = service.app[POOL]
    async with pool.connection() as conn:
        await db.create_tenant(conn, tenant, tenant, base_settings.authz_history_ms)
    settings = dataclasses.replace(
        base_settings, grpc_port=free_port(), grpc_key=GRPC_KEY, spicedb_tenant=tenant
    )
    svc = await InProcessService(settings, pg_url).start()
    try:
        client = await asyncio.to_thread(
            InsecureClient, f"127.0.0.1:{settings.grpc_port}", GRPC_KEY
        )
        doc = await defined_type(client)
        old = await write(client, update(Op.OPERATION_TOUCH, f"{doc}:1", "owner", "user:a"))
        async with pool.connection() as conn:
            assert await db.delete_tenant(conn, tenant)
            await db.create_tenant(conn, tenant, tenant, base_settings.authz_history_ms)
        doc = await defined_type(client)
        await write(client, update(Op.OPERATION_TOUCH, f"{doc}:2", "owner", "user:b"))
        watch = WatchReader(client, WatchRequest(optional_start_cursor=old.written_at))
        try:
            err = await watch.error()
        finally:
            watch.close()
        assert err.code() == grpc.StatusCode.OUT_OF_RANGE
        assert "deleted and re-created" in err.details()
        assert "ReadRelationships" in err.details()
        with pytest.raises(grpc.RpcError) as read_err:
            await asyncio.to_thread(
                lambda: list(
                    client.ReadRelationships(
                        ReadRelationshipsRequest(
                            relationship_filter=RelationshipFilter(resource_type=doc),
                            consistency=Consistency(at_least_as_fresh=old.written_at),
                        )
                    )
                )
            )
        assert read_err.value.code() == grpc.StatusCode.OUT_OF_RANGE
    finally:
        await svc.stop()


async def test_permission_checks_are_unimplemented_with_a_reason(spicedb):
    req = CheckPermissionRequest(
        resource=ObjectReference(object_type="doc", object_id="1"),
        permission="view",
        subject=SubjectReference(object=ObjectReference(object_type="user", object_id="a")),
    )
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(spicedb.CheckPermission, req)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "change-stream service" in err.value.details()
