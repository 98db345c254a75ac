"""``store.authz_reads`` and ``store.authz_writes`` against the test PostgreSQL: the SQL filter
agrees with ``matches``, and a write is one transaction (change + record, or neither)."""

from __future__ import annotations

import itertools

import pytest

from watch_service.protocol import authz as pa
from watch_service.store import authz_reads as reads
from watch_service.store import authz_writes as db
from watch_service.store import topics

pytestmark = pytest.mark.pg
HISTORY_MS = 3_600_000


async def test_sql_filter_agrees_with_matches(conn):
    tenant = "store-filter"
    await conn.execute("DELETE FROM authz_tenants WHERE id = %s", (tenant,))
    await db.create_tenant(conn, tenant, tenant, HISTORY_MS)
    tuples = [
        pa.Tuple(e, i, r, s, sid, sr)
        for e, i, r, s, sid, sr in itertools.product(
            ["doc", "folder"],
            ["a1", "b2"],
            ["viewer", "owner"],
            ["user", "team"],
            ["u", "v"],
            ["", "member"],
        )
    ]
    await db.apply(conn, tenant, "test", db.Write([("write", t) for t in tuples]), HISTORY_MS)
    filters = [
        pa.TupleFilter(),
        pa.TupleFilter(entity_type="doc"),
        pa.TupleFilter(entity_ids=("a1",), relation="owner"),
        pa.TupleFilter(entity_id_prefix="b"),
        pa.TupleFilter(subject_relation=""),
        pa.TupleFilter(subject_type="team", subject_ids=("v",), subject_relation="member"),
    ]
    for f in filters:
        got = await reads.read_tuples(conn, tenant, f, None, 1000)
        assert got == sorted((t for t in tuples if pa.matches(f, t)), key=pa.Tuple.key), f


async def test_failed_write_leaves_nothing(conn):
    tenant = "store-atomic"
    await conn.execute("DELETE FROM authz_tenants WHERE id = %s", (tenant,))
    await db.create_tenant(conn, tenant, tenant, HISTORY_MS)
    t1, t2 = pa.parse_tuple("doc:1#owner@user:a"), pa.parse_tuple("doc:2#owner@user:a")
    first = await db.apply(conn, tenant, "test", db.Write([("create", t1)]), HISTORY_MS)
    with pytest.raises(db.TupleExists):
        await db.apply(conn, tenant, "test", db.Write([("create", t2), ("create", t1)]), HISTORY_MS)
    with pytest.raises(db.PreconditionFailed):
        await db.apply(
            conn,
            tenant,
            "test",
            db.Write(
                [("touch", t2)],
                preconditions=[db.Precondition(True, pa.TupleFilter(relation="nope"))],
            ),
            HISTORY_MS,
        )
    assert await reads.read_tuples(conn, tenant, pa.TupleFilter(), None, 10) == [t1]
    topic = await topics.get_topic(conn, pa.change_topic(tenant))
    assert topic.head_seq == first.seq == 1 and topic.ttl_ms == HISTORY_MS
    with pytest.raises(db.TenantNotFound):
        await db.apply(conn, "no-such", "test", db.Write([("touch", t1)]), HISTORY_MS)
    assert await db.delete_tenant(conn, tenant)
    assert await topics.get_topic(conn, pa.change_topic(tenant)) is None
