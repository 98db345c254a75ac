"""The SpiceDB gRPC surface through the official ``authzed`` client (tenant t1)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from authzed.api.v1 import (
    DeleteRelationshipsRequest,
    InsecureClient,
    Precondition,
    ReadRelationshipsRequest,
    RelationshipFilter,
    SubjectFilter,
    WatchRequest,
    ZedToken,
)
from authzed.api.v1.permission_service_pb2 import ImportBulkRelationshipsRequest
from authzed.api.v1.watch_service_pb2 import WATCH_KIND_INCLUDE_CHECKPOINTS
from google.protobuf.json_format import MessageToDict

from watch_service.protocol import authz as pa
from watch_service.store import retention
from watch_service.web.app_keys import POOL

from .spicedb_support import (
    Op,
    WatchReader,
    defined_type,
    no_key_client,
    rel,
    struct,
    text,
    update,
    write,
)

pytestmark = pytest.mark.service


async def test_write_delete_watch_with_metadata(spicedb):
    doc = await defined_type(spicedb)
    start = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:0", "owner", "user:zero"))
    watch = WatchReader(
        spicedb, WatchRequest(optional_start_cursor=start.written_at, optional_object_types=[doc])
    )
    try:
        w1 = await write(
            spicedb,
            update(Op.OPERATION_CREATE, f"{doc}:1", "viewer", "user:tom"),
            update(Op.OPERATION_TOUCH, f"{doc}:1", "viewer", "group:eng#member"),
            metadata={"request_id": "12345", "n": 1},
        )
        w2 = await write(spicedb, update(Op.OPERATION_DELETE, f"{doc}:1", "viewer", "user:tom"))
        d = await asyncio.to_thread(
            spicedb.DeleteRelationships,
            DeleteRelationshipsRequest(
                relationship_filter=RelationshipFilter(resource_type=doc),
                optional_transaction_metadata=struct({"request_id": "del"}),
            ),
        )
        assert d.relationships_deleted_count == 2  # doc:0 owner and doc:1 group viewer
        got = await watch.take(3)
    finally:
        watch.close()
    assert [r.changes_through.token for r in got] == [
        w1.written_at.token,
        w2.written_at.token,
        d.deleted_at.token,
    ]
    assert [(u.operation, text(u)) for u in got[0].updates] == [
        (Op.OPERATION_CREATE, f"{doc}:1#viewer@user:tom"),
        (Op.OPERATION_TOUCH, f"{doc}:1#viewer@group:eng#member"),
    ]
    assert MessageToDict(got[0].optional_transaction_metadata) == {"request_id": "12345", "n": 1}
    assert [MessageToDict(m) for m in got[0].full_revision_metadata] == [
        {"request_id": "12345", "n": 1}
    ]
    assert [(u.operation, text(u)) for u in got[1].updates] == [
        (Op.OPERATION_DELETE, f"{doc}:1#viewer@user:tom")
    ]
    assert not got[1].HasField("optional_transaction_metadata")
    assert sorted(text(u) for u in got[2].updates) == [
        f"{doc}:0#owner@user:zero",
        f"{doc}:1#viewer@group:eng#member",
    ]
    assert MessageToDict(got[2].optional_transaction_metadata) == {"request_id": "del"}


async def test_preconditions_and_create_conflicts_write_nothing(spicedb):
    doc = await defined_type(spicedb)
    await write(spicedb, update(Op.OPERATION_CREATE, f"{doc}:1", "owner", "user:a"))
    must_match = Precondition(
        operation=Precondition.OPERATION_MUST_MATCH,
        filter=RelationshipFilter(resource_type=doc, optional_relation="editor"),
    )
    with pytest.raises(grpc.RpcError) as err:
        await write(
            spicedb,
            update(Op.OPERATION_TOUCH, f"{doc}:2", "owner", "user:b"),
            preconditions=[must_match],
        )
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as err:
        await write(
            spicedb,
            update(Op.OPERATION_TOUCH, f"{doc}:3", "owner", "user:c"),
            update(Op.OPERATION_CREATE, f"{doc}:1", "owner", "user:a"),
        )
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    must_not = Precondition(
        operation=Precondition.OPERATION_MUST_NOT_MATCH,
        filter=RelationshipFilter(resource_type=doc, optional_resource_id="9"),
    )
    await write(
        spicedb, update(Op.OPERATION_TOUCH, f"{doc}:4", "owner", "user:d"), preconditions=[must_not]
    )
    assert await read_all(spicedb, RelationshipFilter(resource_type=doc)) == [
        f"{doc}:1#owner@user:a",
        f"{doc}:4#owner@user:d",
    ]


async def read_all(client, f: RelationshipFilter, limit: int = 0) -> list[str]:
    def run():
        return [
            text(r)
            for r in client.ReadRelationships(
                ReadRelationshipsRequest(relationship_filter=f, optional_limit=limit)
            )
        ]

    return await asyncio.to_thread(run)


async def test_read_relationships_filters_limit_cursor(spicedb):
    doc = await defined_type(spicedb)
    await write(
        spicedb,
        *[update(Op.OPERATION_TOUCH, f"{doc}:{i}", "viewer", f"user:u{i % 2}") for i in range(5)],
    )
    by_subject = RelationshipFilter(
        resource_type=doc,
        optional_subject_filter=SubjectFilter(subject_type="user", optional_subject_id="u1"),
    )
    assert await read_all(spicedb, by_subject) == [
        f"{doc}:1#viewer@user:u1",
        f"{doc}:3#viewer@user:u1",
    ]
    first = await asyncio.to_thread(
        lambda: list(
            spicedb.ReadRelationships(
                ReadRelationshipsRequest(
                    relationship_filter=RelationshipFilter(resource_type=doc), optional_limit=2
                )
            )
        )
    )
    assert [r.relationship.resource.object_id for r in first] == ["0", "1"]
    rest = await asyncio.to_thread(
        lambda: list(
            spicedb.ReadRelationships(
                ReadRelationshipsRequest(
                    relationship_filter=RelationshipFilter(resource_type=doc),
                    optional_cursor=first[-1].after_result_cursor,
                )
            )
        )
    )
    assert [r.relationship.resource.object_id for r in rest] == ["2", "3", "4"]


async def test_checkpoints_on_an_idle_stream(spicedb):
    doc = await defined_type(spicedb)
    start = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:1", "owner", "user:a"))
    watch = WatchReader(
        spicedb,
        WatchRequest(
            optional_start_cursor=start.written_at,
            optional_object_types=[doc],
            optional_update_kinds=[WATCH_KIND_INCLUDE_CHECKPOINTS],
        ),
    )
    try:
        idle = await watch.take(2, skip_checkpoints=False)  # checkpoint_ms = 200 in the fixture
        assert all(r.is_checkpoint and not r.updates for r in idle)
        assert pa.decode_token(
            pa.change_topic("t1"), idle[0].changes_through.token
        ) >= pa.decode_token(pa.change_topic("t1"), start.written_at.token)
        w = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:2", "owner", "user:b"))
        [change] = await watch.take(1)
        assert change.changes_through.token == w.written_at.token
    finally:
        watch.close()


async def test_import_bulk_produces_watch_events(spicedb):
    doc = await defined_type(spicedb)
    start = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:start", "owner", "user:a"))
    watch = WatchReader(
        spicedb, WatchRequest(optional_start_cursor=start.written_at, optional_object_types=[doc])
    )
    batches = [
        ImportBulkRelationshipsRequest(
            relationships=[rel(f"{doc}:{b}-{i}", "viewer", f"user:{i}") for i in range(600)]
        )
        for b in range(3)
    ]
    try:
        resp = await asyncio.to_thread(spicedb.ImportBulkRelationships, iter(batches))
        assert resp.num_loaded == 1800
        got = await watch.take(1)  # 1800 changes in one transaction: one revision
    finally:
        watch.close()
    assert [len(r.updates) for r in got] == [1800]  # stored as records of <= 1000
    assert {u.operation for r in got for u in r.updates} == {Op.OPERATION_CREATE}
    assert len({text(u) for r in got for u in r.updates}) == 1800


async def test_history_window_error(spicedb, authz_service):
    doc = await defined_type(spicedb)
    old = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:1", "owner", "user:a"))
    await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:2", "owner", "user:a"))
    pool = authz_service.app[POOL]
    async with pool.connection() as conn:
        gaps = await retention.trim(conn, pa.change_topic("t1"), now_ms=2**62)
    assert gaps and gaps[0].reason == "ttl"
    watch = WatchReader(spicedb, WatchRequest(optional_start_cursor=old.written_at))
    try:
        err = await watch.error()
    finally:
        watch.close()
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE
    assert "before the retained history" in err.details()
    assert "ReadRelationships" in err.details()


async def test_bad_credentials_and_bad_input(spicedb, authz_service, make_service):
    from ..support import free_port
    from .clients import GRPC_KEY

    doc = await defined_type(spicedb)
    port = free_port()  # a service with a key: the shared authz_service is in dev mode
    await make_service(grpc_port=port, grpc_key=GRPC_KEY)
    target = f"127.0.0.1:{port}"
    # as SpiceDB: no key is UNAUTHENTICATED, a wrong key PERMISSION_DENIED (parity, 12.4)
    for client, code in (
        (InsecureClient(target, "wrong"), grpc.StatusCode.PERMISSION_DENIED),
        (no_key_client(target), grpc.StatusCode.UNAUTHENTICATED),
    ):
        with pytest.raises(grpc.RpcError) as err:
            await write(client, update(Op.OPERATION_TOUCH, f"{doc}:1", "owner", "user:a"))
        assert err.value.code() == code
        with pytest.raises(grpc.RpcError) as err:
            await WatchReader(client, WatchRequest()).take(1)
        assert err.value.code() == code
    bad = [
        update(Op.OPERATION_TOUCH, f"{doc}:1", "owner", "user:a"),
        update(Op.OPERATION_TOUCH, f"{doc}:x y", "owner", "user:a"),
    ]
    cases = [
        bad,
        [update(Op.OPERATION_TOUCH, "Bad-Type:1", "owner", "user:a")],
        [update(Op.OPERATION_UNSPECIFIED, f"{doc}:1", "owner", "user:a")],
        [update(Op.OPERATION_TOUCH, f"{doc}:1", "owner", "user:a")] * 2,
        [update(Op.OPERATION_TOUCH, f"{doc}:{i}", "owner", "user:a") for i in range(1001)],
    ]
    for updates in cases:
        with pytest.raises(grpc.RpcError) as err:
            await write(spicedb, *updates)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        await WatchReader(
            spicedb, WatchRequest(optional_start_cursor=ZedToken(token="not-a-token"))
        ).take(1)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await read_all(spicedb, RelationshipFilter(resource_type=doc)) == []


async def test_oversized_message_is_resource_exhausted(make_service):
    from ..support import free_port
    from .clients import GRPC_KEY

    port = free_port()
    await make_service(grpc_port=port, grpc_key=GRPC_KEY, max_body_bytes=4096)
    client = InsecureClient(f"127.0.0.1:{port}", GRPC_KEY)
    doc = await defined_type(client)
    with pytest.raises(grpc.RpcError) as err:
        await write(
            client,
            *[
                update(Op.OPERATION_TOUCH, f"{doc}:{'x' * 100}{i}", "owner", "user:a")
                for i in range(60)
            ],
        )
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await read_all(client, RelationshipFilter(resource_type=doc)) == []
