"""Authorization data in PostgreSQL: tenants, tuples, attributes, schema text, and the one
transaction per write that changes them and appends its change record(s) to the tenant's
change topic (``protocol.authz.change_topic``).

Every write transaction first locks the change topic's row (``SELECT … FOR UPDATE``), the same
lock ``topics.append`` takes. Writers to one tenant are therefore serialised: preconditions
and CREATE checks see a stable state, and commit order is seq order (invariant L1). The topic
is created on first use with ``ttl_ms`` = the history window; its retention is the window.
"""
from __future__ import annotations

import dataclasses
import secrets
import time

import orjson
from psycopg import AsyncConnection, errors, sql

from watch_service.protocol import authz as pa
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.store import topics

_T_COLS = ("entity_type", "entity_id", "relation", "subject_type", "subject_id",
           "subject_relation")
_T_SEL = sql.SQL(", ").join(map(sql.Identifier, _T_COLS))


class AuthzStoreError(Exception):
    """A write could not be applied; nothing was written."""


class TenantNotFound(AuthzStoreError):
    pass


class TenantExists(AuthzStoreError):
    pass


class TupleExists(AuthzStoreError):
    def __init__(self, t: pa.Tuple) -> None:
        super().__init__(f"relationship {pa.format_tuple(t)} already exists")
        self.tuple = t


class PreconditionFailed(AuthzStoreError):
    pass


@dataclasses.dataclass(frozen=True)
class Precondition:
    must_match: bool
    filter: pa.TupleFilter


@dataclasses.dataclass(frozen=True)
class Write:
    """One transaction's worth of changes. ``tuple_ops`` ops: create (fails if present),
    touch (upsert, always reported), write (insert if absent, reported only if new),
    delete (reported only if present)."""
    tuple_ops: list[tuple[str, pa.Tuple]] = dataclasses.field(default_factory=list)
    attributes: list[pa.Attribute] = dataclasses.field(default_factory=list)
    delete_tuples: pa.TupleFilter | None = None
    delete_limit: int | None = None
    allow_partial: bool = True  # with delete_limit: fail, rather than stop, at the limit
    delete_attributes: pa.AttributeFilter | None = None
    preconditions: list[Precondition] = dataclasses.field(default_factory=list)
    metadata: dict | None = None


@dataclasses.dataclass(frozen=True)
class WriteResult:
    seq: int          # the token position: the last record appended, else the head
    changes: int
    deleted: int = 0
    partial: bool = False  # delete_limit stopped the delete before every match was gone


# -- tenants ---------------------------------------------------------------------------------
async def create_tenant(conn: AsyncConnection, tenant: str, name: str,
                        history_ms: int) -> tuple[str, str, object]:
    async with conn.transaction():
        cur = await conn.execute(
            "INSERT INTO authz_tenants (id, name) VALUES (%s, %s) ON CONFLICT DO NOTHING "
            "RETURNING id, name, created_at", (tenant, name))
        row = await cur.fetchone()
        if row is None:
            raise TenantExists(f"tenant {tenant!r} already exists")
        await topics.put_topic(conn, pa.change_topic(tenant), TopicConfig(None, history_ms))
    return row


async def list_tenants(conn: AsyncConnection, after: str, limit: int) -> list[tuple]:
    cur = await conn.execute("SELECT id, name, created_at FROM authz_tenants WHERE id > %s "
                             "ORDER BY id LIMIT %s", (after, limit))
    return await cur.fetchall()


async def delete_tenant(conn: AsyncConnection, tenant: str) -> bool:
    """Delete a tenant, its data and its change topic (watchers see the topic go). The topic
    row is locked first, in the same order as writes, so the two cannot deadlock."""
    async with conn.transaction():
        await conn.execute(_LOCK, (pa.change_topic(tenant), tenant))
        cur = await conn.execute("DELETE FROM authz_tenants WHERE id = %s RETURNING id", (tenant,))
        if await cur.fetchone() is None:
            return False
        await topics.delete_topic(conn, pa.change_topic(tenant))
    return True


async def ensure_topic(conn: AsyncConnection, tenant: str, history_ms: int) -> topics.TopicInfo:
    """The tenant's live change topic, created if missing. Raises TenantNotFound."""
    name = pa.change_topic(tenant)
    for _ in range(3):
        cur = await conn.execute("SELECT 1 FROM authz_tenants WHERE id = %s", (tenant,))
        if await cur.fetchone() is None:
            raise TenantNotFound(f"tenant {tenant!r} does not exist")
        info = await topics.get_topic(conn, name)
        if info is not None:
            return info
        try:
            info, _ = await topics.put_topic(conn, name, TopicConfig(None, history_ms))
            return info
        except errors.UniqueViolation:
            continue  # created concurrently: read it again
    raise AuthzStoreError(f"could not create the change topic of tenant {tenant!r}")


# -- schema ----------------------------------------------------------------------------------
async def write_schema(conn: AsyncConnection, tenant: str, body: str) -> str:
    version = f"{time.time_ns() // 1000:x}{secrets.token_hex(3)}"
    try:
        await conn.execute("INSERT INTO authz_schemas (tenant, version, body) VALUES (%s, %s, %s)",
                           (tenant, version, body))
    except errors.ForeignKeyViolation:
        raise TenantNotFound(f"tenant {tenant!r} does not exist") from None
    return version


async def read_schema(conn: AsyncConnection, tenant: str, version: str | None) -> tuple | None:
    """(version, body) of that version, or of the latest when version is None."""
    cur = await conn.execute(
        "SELECT version, body FROM authz_schemas WHERE tenant = %s AND (%s::text IS NULL OR "
        "version = %s) ORDER BY created_at DESC, version DESC LIMIT 1", (tenant, version, version))
    return await cur.fetchone()


async def tenant_exists(conn: AsyncConnection, tenant: str) -> bool:
    cur = await conn.execute("SELECT 1 FROM authz_tenants WHERE id = %s", (tenant,))
    return await cur.fetchone() is not None


# -- reads -----------------------------------------------------------------------------------
def tuple_where(f: pa.TupleFilter) -> tuple[sql.Composable, list]:
    """A SQL condition (no leading AND) and its parameters, equivalent to ``pa.matches``."""
    parts: list[sql.Composable] = [sql.SQL("true")]
    params: list = []
    for col, value in (("entity_type", f.entity_type), ("relation", f.relation),
                       ("subject_type", f.subject_type), ("subject_relation", f.subject_relation)):
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


async def read_tuples(conn: AsyncConnection, tenant: str, f: pa.TupleFilter,
                      after: tuple[str, ...] | None, limit: int) -> list[pa.Tuple]:
    """Matching tuples in key order, strictly after the key ``after`` (keyset paging)."""
    where, params = tuple_where(f)
    page = sql.SQL("true") if after is None else sql.SQL("({}) > ({})").format(
        _T_SEL, sql.SQL(", ").join(sql.Placeholder() * len(_T_COLS)))
    query = sql.SQL("SELECT {} FROM authz_tuples WHERE tenant = %s AND {} AND {} "
                    "ORDER BY {} LIMIT %s").format(_T_SEL, where, page, _T_SEL)
    cur = await conn.execute(query, [tenant, *params, *(after or ()), limit])
    return [pa.Tuple(*row) for row in await cur.fetchall()]


def _attr_where(f: pa.AttributeFilter) -> tuple[sql.Composable, list]:
    parts, params = [sql.SQL("true")], []
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


async def read_attributes(conn: AsyncConnection, tenant: str, f: pa.AttributeFilter,
                          after: tuple[str, str, str] | None, limit: int) -> list[pa.Attribute]:
    where, params = _attr_where(f)
    page = sql.SQL("(entity_type, entity_id, attribute) > (%s, %s, %s)") if after else sql.SQL("true")
    query = sql.SQL("SELECT entity_type, entity_id, attribute, value FROM authz_attributes "
                    "WHERE tenant = %s AND {} AND {} ORDER BY entity_type, entity_id, attribute "
                    "LIMIT %s").format(where, page)
    cur = await conn.execute(query, [tenant, *params, *(after or ()), limit])
    return [pa.Attribute(*row) for row in await cur.fetchall()]


# -- the write transaction -----------------------------------------------------------------
_LOCK = """SELECT t.head_seq FROM topics t WHERE t.name = %s AND t.deleted_at IS NULL
             AND EXISTS (SELECT 1 FROM authz_tenants WHERE id = %s) FOR UPDATE OF t"""
_UNNEST6 = "unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])"


async def apply(conn: AsyncConnection, tenant: str, source: str, w: Write,
                history_ms: int) -> WriteResult:
    """Apply ``w`` as one transaction that also appends its change record(s); raises an
    AuthzStoreError (nothing written) when a precondition, CREATE or the tenant fails."""
    topic = pa.change_topic(tenant)
    for _ in range(2):
        async with conn.transaction():
            cur = await conn.execute(_LOCK, (topic, tenant))
            row = await cur.fetchone()
            if row is not None:
                return await _apply_locked(conn, tenant, topic, row[0], source, w)
        await ensure_topic(conn, tenant, history_ms)  # raises TenantNotFound
    raise AuthzStoreError(f"the change topic of tenant {tenant!r} vanished; retry")


async def _apply_locked(conn: AsyncConnection, tenant: str, topic: str, head_seq: int,
                        source: str, w: Write) -> WriteResult:
    for i, p in enumerate(w.preconditions):
        where, params = tuple_where(p.filter)
        cur = await conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM authz_tuples WHERE "
                                         "tenant = %s AND {})").format(where), [tenant, *params])
        if (await cur.fetchone())[0] != p.must_match:
            rule = "MUST_MATCH" if p.must_match else "MUST_NOT_MATCH"
            raise PreconditionFailed(f"optional_preconditions[{i}]: {rule} failed")
    changes = await _tuple_ops(conn, tenant, w.tuple_ops)
    changes += await _write_attributes(conn, tenant, w.attributes)
    deleted, partial = 0, False
    if w.delete_tuples is not None and w.delete_limit:
        partial = await count_tuples(conn, tenant, w.delete_tuples, w.delete_limit + 1) > w.delete_limit
        if partial and not w.allow_partial:
            raise PreconditionFailed(f"more than optional_limit={w.delete_limit} relationships "
                                     "match and optional_allow_partial_deletions is false")
    if w.delete_tuples is not None:
        gone = await _delete_tuples(conn, tenant, w.delete_tuples, w.delete_limit)
        deleted = len(gone)
        changes += [pa.Change("delete", tuple=t) for t in gone]
    if w.delete_attributes is not None:
        where, params = _attr_where(w.delete_attributes)
        cur = await conn.execute(sql.SQL(
            "DELETE FROM authz_attributes WHERE tenant = %s AND {} "
            "RETURNING entity_type, entity_id, attribute, value").format(where), [tenant, *params])
        changes += [pa.Change("delete", attribute=pa.Attribute(*r))
                    for r in sorted(await cur.fetchall(), key=lambda r: r[:3])]
    if not changes:
        return WriteResult(head_seq, 0, deleted, partial)
    datas = pa.change_records(tenant, source, changes, w.metadata)
    result = await topics.append(conn, topic, [NewRecord(d, None, None, None) for d in datas])
    assert result is not None  # the topic row is locked by this transaction
    return WriteResult(result.last_seq, len(changes), deleted, partial)


def _columns(tuples: list[pa.Tuple]) -> list[list[str]]:
    return [list(col) for col in zip(*(t.key() for t in tuples))] if tuples else [[]] * 6


async def _tuple_ops(conn: AsyncConnection, tenant: str,
                     ops: list[tuple[str, pa.Tuple]]) -> list[pa.Change]:
    upserts = [t for op, t in ops if op != "delete"]
    deletes = [t for op, t in ops if op == "delete"]
    inserted: set[tuple] = set()
    if upserts:
        cur = await conn.execute(sql.SQL(
            "INSERT INTO authz_tuples (tenant, {}) SELECT %s, * FROM " + _UNNEST6 +
            " ON CONFLICT DO NOTHING RETURNING {}").format(_T_SEL, _T_SEL),
            [tenant, *_columns(upserts)])
        inserted = {tuple(r) for r in await cur.fetchall()}
    removed: set[tuple] = set()
    if deletes:
        cur = await conn.execute(sql.SQL(
            "DELETE FROM authz_tuples WHERE tenant = %s AND ({}) IN (SELECT * FROM " + _UNNEST6 +
            ") RETURNING {}").format(_T_SEL, _T_SEL), [tenant, *_columns(deletes)])
        removed = {tuple(r) for r in await cur.fetchall()}
    changes = []
    for op, t in ops:
        if op == "create" and t.key() not in inserted:
            raise TupleExists(t)
        if (op == "touch" or (op in ("create", "write") and t.key() in inserted)
                or (op == "delete" and t.key() in removed)):
            changes.append(pa.Change("create" if op == "write" else op, tuple=t))
    return changes


async def _write_attributes(conn: AsyncConnection, tenant: str,
                            attrs: list[pa.Attribute]) -> list[pa.Change]:
    if not attrs:
        return []
    cols = [[a.entity_type for a in attrs], [a.entity_id for a in attrs], [a.name for a in attrs],
            [orjson.dumps(a.value).decode() for a in attrs]]
    cur = await conn.execute(
        "INSERT INTO authz_attributes (tenant, entity_type, entity_id, attribute, value) "
        "SELECT %s, e, i, n, v::jsonb FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
        "AS u(e, i, n, v) ON CONFLICT (tenant, entity_type, entity_id, attribute) DO UPDATE "
        "SET value = EXCLUDED.value WHERE authz_attributes.value IS DISTINCT FROM EXCLUDED.value "
        "RETURNING entity_type, entity_id, attribute", [tenant, *cols])
    changed = {tuple(r) for r in await cur.fetchall()}
    return [pa.Change("create", attribute=a) for a in attrs
            if (a.entity_type, a.entity_id, a.name) in changed]


async def _delete_tuples(conn: AsyncConnection, tenant: str, f: pa.TupleFilter,
                         limit: int | None) -> list[pa.Tuple]:
    where, params = tuple_where(f)
    if limit:
        where = sql.SQL("{} AND ({}) IN (SELECT {} FROM authz_tuples WHERE tenant = %s AND {} "
                        "ORDER BY {} LIMIT %s)").format(where, _T_SEL, _T_SEL, where, _T_SEL)
        params = [*params, tenant, *params, limit]
    cur = await conn.execute(sql.SQL("DELETE FROM authz_tuples WHERE tenant = %s AND {} "
                                     "RETURNING {}").format(where, _T_SEL), [tenant, *params])
    return sorted((pa.Tuple(*r) for r in await cur.fetchall()), key=pa.Tuple.key)


async def count_tuples(conn: AsyncConnection, tenant: str, f: pa.TupleFilter, cap: int) -> int:
    """How many tuples match, counting at most ``cap``."""
    where, params = tuple_where(f)
    cur = await conn.execute(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM authz_tuples WHERE "
                                     "tenant = %s AND {} LIMIT %s) m").format(where),
                             [tenant, *params, cap])
    return (await cur.fetchone())[0]
