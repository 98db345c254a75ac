"""Reading authorization data from PostgreSQL: tenants, tuples and attributes,
and the SQL filters (``tuple_where``, ``attribute_where``) that the reads and the write
transaction (``store.authz_writes``) share.

``tuple_where`` is the SQL twin of ``protocol.authz.matches``: a tuple filter selects the same
rows here as the pure predicate does in memory. Tuple pages are keyset pages in key order
(:data:`TUPLE_COLUMNS`), so a page boundary never skips or repeats a tuple.
"""

from __future__ import annotations

from psycopg import AsyncConnection, sql

from watch_service.protocol import authz as pa

TUPLE_COLUMNS = (
    "entity_type",
    "entity_id",
    "relation",
    "subject_type",
    "subject_id",
    "subject_relation",
)
TUPLE_SELECT = sql.SQL(", ").join(map(sql.Identifier, TUPLE_COLUMNS))


# -- tenants -----------------------------------------------------------------------------
async def tenant_exists(conn: AsyncConnection, tenant: str) -> bool:
    cur = await conn.execute("SELECT 1 FROM authz_tenants WHERE id = %s", (tenant,))
    return await cur.fetchone() is not None


async def list_tenants(conn: AsyncConnection, after: str, limit: int) -> list[tuple]:
    cur = await conn.execute(
        "SELECT id, name, created_at FROM authz_tenants WHERE id > %s ORDER BY id LIMIT %s",
        (after, limit),
    )
    return await cur.fetchall()


async def topic_incarnation(conn: AsyncConnection, tenant: str) -> int | None:
    """The creation time (µs since the epoch) of the tenant's live change topic: a tenant's
    delete and re-create changes it, which is how a token from before is told apart."""
    cur = await conn.execute(
        "SELECT (extract(epoch FROM created_at) * 1000000)::bigint FROM topics "
        "WHERE name = %s AND deleted_at IS NULL",
        (pa.change_topic(tenant),),
    )
    row = await cur.fetchone()
    return None if row is None else row[0]


async def latest_schema_version(conn: AsyncConnection, tenant: str, dialect: str) -> str | None:
    """The version id of the tenant's current schema in ``dialect`` (what a cache of the
    parsed schema is keyed by), without reading the schema itself."""
    cur = await conn.execute(
        "SELECT version FROM authz_schemas WHERE tenant = %s AND dialect = %s "
        "ORDER BY created_at DESC, version DESC LIMIT 1",
        (tenant, dialect),
    )
    row = await cur.fetchone()
    return None if row is None else row[0]


# -- filters ---------------------------------------------------------------------------------
def tuple_where(f: pa.TupleFilter) -> tuple[sql.Composable, list]:
    """A SQL condition (no leading AND) and its parameters, equivalent to ``pa.matches``."""
    parts: list[sql.Composable] = [sql.SQL("true")]
    params: list = []
    for col, value in (
        ("entity_type", f.entity_type),
        ("relation", f.relation),
        ("subject_type", f.subject_type),
        ("subject_relation", f.subject_relation),
    ):
        if value is not None:
            parts.append(sql.SQL("{} = %s").format(sql.Identifier(col)))
            params.append(value)
    for col, values in (("entity_id", f.entity_ids), ("subject_id", f.subject_ids)):
        if values:
            parts.append(sql.SQL("{} = ANY(%s)").format(sql.Identifier(col)))
            params.append(list(values))
    if f.entity_id_prefix is not None:
        parts.append(sql.SQL("left(entity_id, %s) = %s"))
        params += [len(f.entity_id_prefix), f.entity_id_prefix]
    return sql.SQL(" AND ").join(parts), params


def attribute_where(f: pa.AttributeFilter) -> tuple[sql.Composable, list]:
    """A SQL condition (no leading AND) and its parameters selecting the attributes ``f`` names."""
    parts: list[sql.Composable] = [sql.SQL("true")]
    params: list = []
    if f.entity_type is not None:
        parts.append(sql.SQL("entity_type = %s"))
        params.append(f.entity_type)
    if f.entity_ids:
        parts.append(sql.SQL("entity_id = ANY(%s)"))
        params.append(list(f.entity_ids))
    if f.names:
        parts.append(sql.SQL("attribute = ANY(%s)"))
        params.append(list(f.names))
    return sql.SQL(" AND ").join(parts), params


# -- tuples and attributes -------------------------------------------------------------------
async def read_tuples(
    conn: AsyncConnection, tenant: str, f: pa.TupleFilter, after: tuple[str, ...] | None, limit: int
) -> list[pa.Tuple]:
    """Matching tuples in key order, strictly after the key ``after`` (keyset paging)."""
    where, params = tuple_where(f)
    page = (
        sql.SQL("true")
        if after is None
        else sql.SQL("({}) > ({})").format(
            TUPLE_SELECT, sql.SQL(", ").join(sql.Placeholder() * len(TUPLE_COLUMNS))
        )
    )
    query = sql.SQL(
        "SELECT {} FROM authz_tuples WHERE tenant = %s AND {} AND {} ORDER BY {} LIMIT %s"
    ).format(TUPLE_SELECT, where, page, TUPLE_SELECT)
    cur = await conn.execute(query, [tenant, *params, *(after or ()), limit])
    return [pa.Tuple(*row) for row in await cur.fetchall()]


async def count_tuples(conn: AsyncConnection, tenant: str, f: pa.TupleFilter, cap: int) -> int:
    """How many tuples match, counting at most ``cap``."""
    where, params = tuple_where(f)
    cur = await conn.execute(
        sql.SQL(
            "SELECT count(*) FROM (SELECT 1 FROM authz_tuples WHERE tenant = %s AND {} LIMIT %s) m"
        ).format(where),
        [tenant, *params, cap],
    )
    row = await cur.fetchone()
    assert row is not None  # an aggregate always returns a row
    return row[0]


async def read_attributes(
    conn: AsyncConnection,
    tenant: str,
    f: pa.AttributeFilter,
    after: tuple[str, str, str] | None,
    limit: int,
) -> list[pa.Attribute]:
    """Matching attributes in (entity type, entity id, name) order, strictly after ``after``."""
    where, params = attribute_where(f)
    page = (
        sql.SQL("(entity_type, entity_id, attribute) > (%s, %s, %s)") if after else sql.SQL("true")
    )
    query = sql.SQL(
        "SELECT entity_type, entity_id, attribute, value FROM authz_attributes "
        "WHERE tenant = %s AND {} AND {} ORDER BY entity_type, entity_id, attribute "
        "LIMIT %s"
    ).format(where, page)
    cur = await conn.execute(query, [tenant, *params, *(after or ()), limit])
    return [pa.Attribute(*row) for row in await cur.fetchall()]
