"""The Permify and SpiceDB watches after their source went back: the database (log and
authorization tables) restored from a backup taken before the last write. A client resuming
from the token that write gave it holds a position the source no longer has; neither real
server says so (SpiceDB's Watch waits past it, see test_spicedb_differential; Permify's
follows a transaction id it cannot find and streams nothing), so ours refuses it with each
one's status for a position it cannot honour, naming the changes lost and the recovery. A
token the source still has follows on, and the change written in place of the lost one
arrives. Watches that were open across the restore, and had sent the lost change, end with the
same status once the service's LISTEN connection is lost, as a failover loses it. Official
clients: ``authzed`` (SpiceDB gRPC), ``permify`` (REST); Permify's gRPC through its
``base.v1`` stubs."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import permify
import psycopg
import pytest
from authzed.api.v1 import (
    InsecureClient,
    WatchRequest,
    WriteRelationshipsRequest,
    WriteSchemaRequest,
)

from watch_service.compat.proto import permify_base_v1_pb2 as pb

from ..support import InProcessService, free_port
from .clients import GRPC_KEY, PermifyWatch, permify_grpc_client, seq_of
from .spicedb_support import Op, text, update
from .test_permify_rest import new_tenant

pytestmark = [pytest.mark.service, pytest.mark.pg]


@pytest.fixture(scope="module")
async def surfaces(restorable, base_settings):
    settings = dataclasses.replace(
        base_settings, grpc_port=free_port(), permify_grpc_port=free_port()
    )
    svc = await InProcessService(settings, restorable.url).start()
    yield svc, settings
    await svc.stop()


def spicedb_rewound(first: int, last: int) -> tuple[grpc.StatusCode, str]:
    return (
        grpc.StatusCode.OUT_OF_RANGE,
        "invalid zedtoken: revision was invalid: the watch's position (its start cursor, or "
        "the last revision it sent) is ahead of this datastore's newest revision; changes "
        f"{first}..{last} are no longer here (the datastore went back: a failover to a lagging "
        "replica, or a restore) and are written again with other content. Recover by "
        "re-reading the current state with ReadRelationships and then calling Watch with its "
        "read_at token.",
    )


def touch(resource: str) -> WriteRelationshipsRequest:
    return WriteRelationshipsRequest(
        updates=[update(Op.OPERATION_TOUCH, resource, "viewer", "user:u")]
    )


async def test_a_watch_from_a_position_the_restored_source_lost(restorable, surfaces, http):
    svc, settings = surfaces
    spicedb = InsecureClient(f"127.0.0.1:{settings.grpc_port}", GRPC_KEY)
    api = permify.ApiClient(permify.Configuration(host=svc.url))
    c = permify_grpc_client(settings.permify_grpc_port)
    schema = "definition user {}\ndefinition doc {\n\trelation viewer: user\n}"
    await asyncio.to_thread(spicedb.WriteSchema, WriteSchemaRequest(schema=schema))
    kept = (await asyncio.to_thread(spicedb.WriteRelationships, touch("doc:kept"))).written_at
    tenant = await new_tenant(api)
    url = f"{svc.url}/v1/tenants/{tenant}"

    async def write_tuple(entity_id: str) -> str:
        body = {
            "tuples": [
                {
                    "entity": {"type": "document", "id": entity_id},
                    "relation": "viewer",
                    "subject": {"type": "user", "id": "u"},
                }
            ]
        }
        async with http.post(f"{url}/relationships/write", json=body) as r:
            assert r.status == 200, await r.text()
            return (await r.json())["snap_token"]

    snap_kept = await write_tuple("kept")
    backup = await restorable.dump()
    open_across = spicedb.Watch(WatchRequest(optional_start_cursor=kept), timeout=30)
    permify_across = await PermifyWatch(api, tenant, snap_kept).open()
    lost = (await asyncio.to_thread(spicedb.WriteRelationships, touch("doc:lost"))).written_at
    snap_lost = await write_tuple("lost")
    responses = iter(open_across)
    first = await asyncio.to_thread(next, responses)
    assert first.changes_through == lost
    [line] = await permify_across.lines(1)
    assert line.result.changes.snap_token == snap_lost
    await restorable.restore(backup)
    # What a failover does to the connections that LISTEN for changes: they are lost.
    async with await psycopg.AsyncConnection.connect(restorable.url, autocommit=True) as db:
        cur = await db.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = 'LISTEN auditsync'"
        )
        (terminated,) = await cur.fetchone()
        assert terminated >= 1  # ours, and the other services' on this database if listening

    # The watch that was open across it had sent doc:lost: it ends, saying so.
    seq = seq_of(settings.spicedb_tenant, lost.token)
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(next, responses)
    assert (err.value.code(), err.value.details()) == spicedb_rewound(seq, seq)
    refused = spicedb.Watch(WatchRequest(optional_start_cursor=lost), timeout=10)
    with pytest.raises(grpc.RpcError) as err:
        await asyncio.to_thread(next, iter(refused))
    assert (err.value.code(), err.value.details()) == spicedb_rewound(seq, seq)
    following = spicedb.Watch(WatchRequest(optional_start_cursor=kept), timeout=10)
    await asyncio.to_thread(spicedb.WriteRelationships, touch("doc:instead"))
    first = await asyncio.to_thread(next, iter(following))
    assert [text(u) for u in first.updates] == ["doc:instead#viewer@user:u"]
    following.cancel()

    pseq = seq_of(tenant, snap_lost)
    message = (
        f"snap_token is ahead of this tenant's changes: changes {pseq}..{pseq} are no longer "
        "here (the database went back: a failover to a lagging replica, or a restore) and are "
        "written again with other content. Re-read the current state with "
        "data/relationships/read and data/attributes/read, then watch without a snap_token "
        "(from now)."
    )
    try:
        [line] = await permify_across.lines(1)
    finally:
        permify_across.close()
    assert (line.result, line.error.code, line.error.message) == (None, 3, message)
    async with http.post(f"{url}/watch", json={"snap_token": snap_lost}) as r:
        assert (r.status, await r.json()) == (400, {"code": 3, "message": message, "details": []})
    call = c.watch.Watch(pb.WatchRequest(tenant_id=tenant, snap_token=snap_lost))
    with pytest.raises(grpc.aio.AioRpcError) as aerr:
        await asyncio.wait_for(call.read(), 10)
    assert (aerr.value.code(), aerr.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    await c.channel.close()
