"""Concurrent writers to one tenant through both surfaces: every watcher (Permify, SpiceDB,
SSE) sees every transaction exactly once, in the change topic's seq order."""

from __future__ import annotations

import asyncio

import pytest
from authzed.api.v1 import WatchRequest, ZedToken

from watch_service.protocol import authz as pa

from .clients import PermifyWatch, permify_schema_for, seq_of, sse_records
from .spicedb_support import Op, WatchReader, defined_type, update, write

pytestmark = pytest.mark.service
REST_WRITERS, GRPC_WRITERS, WRITES = 4, 2, 10


async def test_concurrent_writers_one_tenant(permify_api, spicedb, authz_service, http):
    doc, url = await defined_type(spicedb), authz_service.url
    schema = {"schema": permify_schema_for(doc)}
    async with http.post(f"{url}/v1/tenants/t1/schemas/write", json=schema) as r:
        assert r.status == 200, await r.text()
    start = await write(spicedb, update(Op.OPERATION_TOUCH, f"{doc}:start", "owner", "user:s"))
    token = start.written_at.token
    first_seq = seq_of("t1", token)
    permify_watch = await PermifyWatch(permify_api, "t1", snap_token=token).open()
    spicedb_watch = WatchReader(
        spicedb,
        WatchRequest(optional_start_cursor=ZedToken(token=token), optional_object_types=[doc]),
    )

    async def rest_writer(w: int) -> list[str]:
        tokens = []
        for i in range(WRITES):
            body = {
                "tuples": [
                    {
                        "entity": {"type": doc, "id": f"r{w}-{i}"},
                        "relation": "viewer",
                        "subject": {"type": "user", "id": f"u{k}"},
                    }
                    for k in range(2)
                ]
            }
            async with http.post(f"{url}/v1/tenants/t1/relationships/write", json=body) as r:
                assert r.status == 200, await r.text()
                tokens.append((await r.json())["snap_token"])
        return tokens

    async def grpc_writer(w: int) -> list[str]:
        tokens = []
        for i in range(WRITES):
            resp = await write(
                spicedb,
                update(Op.OPERATION_CREATE, f"{doc}:g{w}-{i}", "viewer", "user:u0"),
                metadata={"writer": w, "i": i},
            )
            tokens.append(resp.written_at.token)
        return tokens

    total = (REST_WRITERS + GRPC_WRITERS) * WRITES
    try:
        results = await asyncio.gather(
            *[rest_writer(w) for w in range(REST_WRITERS)],
            *[grpc_writer(w) for w in range(GRPC_WRITERS)],
        )
        written = sorted(seq_of("t1", t) for tokens in results for t in tokens)
        assert written == list(range(first_seq + 1, first_seq + 1 + total))
        permify_seen = [
            seq_of("t1", line.result.changes.snap_token)
            for line in await permify_watch.lines(total)
        ]
        spicedb_seen = [
            seq_of("t1", r.changes_through.token) for r in await spicedb_watch.take(total)
        ]
    finally:
        permify_watch.close()
        spicedb_watch.close()
    sse = await sse_records(http, url, pa.change_topic("t1"), first_seq, total)
    assert permify_seen == spicedb_seen == [r["$seq"] for r in sse] == written
    # Every transaction's changes arrived whole, in the record of its own seq.
    sizes = [len(r["data"]["changes"]) for r in sse]
    sources = [r["data"]["source"] for r in sse]
    assert sorted(zip(sources, sizes)) == sorted(
        [("permify", 2)] * REST_WRITERS * WRITES + [("spicedb", 1)] * GRPC_WRITERS * WRITES
    )
