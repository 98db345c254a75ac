"""``store.authz_schemas`` (migration 009) against the test PostgreSQL: versions per
(tenant, dialect), latest-wins reads, newest-first listing, and one change record per write."""

from __future__ import annotations

import pytest

from watch_service.protocol import authz as pa
from watch_service.store import authz_schemas as schemas
from watch_service.store import authz_writes as db
from watch_service.store import topics

pytestmark = pytest.mark.pg
HISTORY_MS = 3_600_000


async def test_versions_per_dialect_and_change_records(conn):
    tenant = "schema-store"
    await conn.execute("DELETE FROM authz_tenants WHERE id = %s", (tenant,))
    await db.create_tenant(conn, tenant, tenant, HISTORY_MS)
    assert await schemas.read_schema(conn, tenant, "permify") is None
    v1 = await schemas.write_schema(conn, tenant, "permify", "entity user {}", {"user": {}}, 1)
    v2 = await schemas.write_schema(conn, tenant, "permify", "entity team {}", {"team": {}}, 1)
    s1 = await schemas.write_schema(conn, tenant, "spicedb", "definition user {}", None, 1)
    assert (await schemas.read_schema(conn, tenant, "permify")) == v2
    assert (await schemas.read_schema(conn, tenant, "permify", v1.version)) == v1
    assert (await schemas.read_schema(conn, tenant, "spicedb")) == s1
    assert await schemas.read_schema(conn, tenant, "spicedb", v1.version) is None
    assert v2.definitions == {"team": {}} and s1.definitions is None
    listed = await schemas.list_schemas(conn, tenant, "permify", None, 10)
    assert [v for v, _ in listed] == [v2.version, v1.version]
    assert [v for v, _ in await schemas.list_schemas(conn, tenant, "permify", v2.version, 10)] == [
        v1.version
    ]
    page = await topics.read(conn, pa.change_topic(tenant), 0, 10)
    assert page is not None
    records = {r.seq: pa.parse_change_record(r.data) for r in page.records}
    for stored in (v1, v2, s1):
        rec = records[stored.seq]
        assert rec.changes == [] and rec.schema == pa.SchemaChange(stored.dialect, stored.version)


async def test_unknown_tenant(conn):
    with pytest.raises(db.TenantNotFound):
        await schemas.write_schema(conn, "schema-nobody", "permify", "entity user {}", {}, 1)
