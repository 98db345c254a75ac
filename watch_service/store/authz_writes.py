"""Writing authorization data to PostgreSQL: tenants, and the one transaction per
write that changes tuples and attributes and appends its change record(s) to the tenant's
change topic (``protocol.authz.change_topic``). Reads and the SQL filters live in
``store.authz_reads``.

Every write transaction first locks the change topic's row (``SELECT … FOR UPDATE``), the same
lock ``topics.append`` takes. Writers to one tenant are therefore serialised: preconditions
and CREATE checks see a stable state, and commit order is seq order (invariant L1). The topic
is created on first use with ``ttl_ms`` = the history window; its retention is the window.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import orjson
from psycopg import AsyncConnection, errors, sql

from watch_service.protocol import authz as pa
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.store import topics
from watch_service.store.authz_reads import (
    TUPLE_SELECT,
    attribute_where,
    count_tuples,
    tenant_exists,
    tuple_where,
)


class AuthzStoreError(AuditsyncError):
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


class DeleteLimitExceeded(AuthzStoreError):
    """More relationships match a limited delete than its limit, and partial deletion was not
    requested (SpiceDB's INVALID_ARGUMENT)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"found more than {limit} relationships to be deleted and partial deletion was "
            "not requested"
        )
        self.limit = limit


@dataclasses.dataclass(frozen=True)
class Precondition:
    must_match: bool
    filter: pa.TupleFilter


@dataclasses.dataclass(frozen=True)
class Write:
    """One transaction's worth of changes. ``tuple_ops`` ops: create (fails if present),
    touch (upsert, reported only if new: a touch that changes nothing is no change),
    write (insert if absent, reported only if new),
    delete (reported only if present)."""

    tuple_ops: list[tuple[str, pa.Tuple]] = dataclasses.field(default_factory=list)
    attributes: list[pa.Attribute] = dataclasses.field(default_factory=list)
    delete_tuples: pa.TupleFilter | None = None
    delete_limit: int | None = None
    allow_partial: bool = True  # with delete_limit: fail, rather than stop, at the limit
    delete_attributes: pa.AttributeFilter | None = None
    preconditions: list[Precondition] = dataclasses.field(default_factory=list)
    metadata: dict | None = None
    # run first, under the topic lock (so against a schema no concurrent write changes):
    # raises to refuse the whole write
    check: Callable[[AsyncConnection], Awaitable[None]] | None = None


@dataclasses.dataclass(frozen=True)
class WriteResult:
    seq: int  # the token position: the last record appended, else the head
    changes: int
    deleted: int = 0
    partial: bool = False  # delete_limit stopped the delete before every match was gone
    epoch: str = ""  # the change topic's incarnation (protocol.authz.topic_epoch), for tokens


LOCK_TOPIC = """SELECT t.head_seq, t.created_at FROM topics t
             WHERE t.name = %s AND t.deleted_at IS NULL
               AND EXISTS (SELECT 1 FROM authz_tenants WHERE id = %s) FOR UPDATE OF t"""
_UNNEST6 = "unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])"


# -- tenants -----------------------------------------------------------------------------
async def create_tenant(
    conn: AsyncConnection, tenant: str, name: str, history_ms: int
) -> tuple[str, str, object]:
    async with conn.transaction():
        cur = await conn.execute(
            "INSERT INTO authz_tenants (id, name) VALUES (%s, %s) ON CONFLICT DO NOTHING "
            "RETURNING id, name, created_at",
            (tenant, name),
        )
        row = await cur.fetchone()
        if row is None:
            raise TenantExists(f"tenant {tenant!r} already exists")
        await topics.put_topic(conn, pa.change_topic(tenant), TopicConfig(None, history_ms))
    return row


async def delete_tenant(conn: AsyncConnection, tenant: str) -> bool:
    """Delete a tenant, its data and its change topic (watchers see the topic go). The topic
    row is locked first, in the same order as writes, so the two cannot deadlock."""
    async with conn.transaction():
        await conn.execute(LOCK_TOPIC, (pa.change_topic(tenant), tenant))
        cur = await conn.execute("DELETE FROM authz_tenants WHERE id = %s RETURNING id", (tenant,))
        if await cur.fetchone() is None:
            return False
        await topics.delete_topic(conn, pa.change_topic(tenant))
    return True


async def ensure_topic(conn: AsyncConnection, tenant: str, history_ms: int) -> topics.TopicInfo:
    """The tenant's live change topic, created if missing. Raises TenantNotFound."""
    name = pa.change_topic(tenant)
    for _ in range(3):
        if not await tenant_exists(conn, tenant):
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


async def apply_history_window(conn: AsyncConnection, history_ms: int) -> int:
    """Give every tenant's live change topic the history window ``history_ms`` (its ttl),
    trimming at once what falls outside; returns how many topics changed. Run at start-up, so
    a changed AUDITSYNC_AUTHZ_HISTORY_MS applies to existing tenants, not only new ones."""
    cur = await conn.execute("SELECT id FROM authz_tenants")
    names = [pa.change_topic(tenant) for (tenant,) in await cur.fetchall()]
    cur = await conn.execute(
        "SELECT name FROM topics WHERE name = ANY(%s) AND deleted_at IS NULL "
        "AND (ttl_ms IS DISTINCT FROM %s OR max_records IS NOT NULL) ORDER BY name",
        (names, history_ms),
    )
    stale = [name for (name,) in await cur.fetchall()]
    for name in stale:
        await topics.put_topic(conn, name, TopicConfig(None, history_ms))
    return len(stale)


# -- the write transaction -------------------------------------------------------------------
async def apply(
    conn: AsyncConnection, tenant: str, source: str, w: Write, history_ms: int
) -> WriteResult:
    """Apply ``w`` as one transaction that also appends its change record(s); raises an
    AuthzStoreError (nothing written) when a precondition, CREATE or the tenant fails."""
    topic = pa.change_topic(tenant)
    for _ in range(2):
        async with conn.transaction():
            cur = await conn.execute(LOCK_TOPIC, (topic, tenant))
            row = await cur.fetchone()
            if row is not None:
                result = await _apply_locked(conn, tenant, topic, row[0], source, w)
                return dataclasses.replace(result, epoch=pa.topic_epoch(row[1]))
        await ensure_topic(conn, tenant, history_ms)  # raises TenantNotFound
    raise AuthzStoreError(f"the change topic of tenant {tenant!r} vanished; retry")


async def _apply_locked(
    conn: AsyncConnection, tenant: str, topic: str, head_seq: int, source: str, w: Write
) -> WriteResult:
    if w.check is not None:
        await w.check(conn)
    for i, p in enumerate(w.preconditions):
        where, params = tuple_where(p.filter)
        cur = await conn.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM authz_tuples WHERE tenant = %s AND {})").format(
                where
            ),
            [tenant, *params],
        )
        row = await cur.fetchone()
        assert row is not None  # SELECT EXISTS always returns a row
        if row[0] != p.must_match:
            rule = "MUST_MATCH" if p.must_match else "MUST_NOT_MATCH"
            raise PreconditionFailed(f"optional_preconditions[{i}]: {rule} failed")
    changes = await _tuple_ops(conn, tenant, w.tuple_ops)
    changes += await _write_attributes(conn, tenant, w.attributes)
    deleted, partial = 0, False
    if w.delete_tuples is not None and w.delete_limit:
        matching = await count_tuples(conn, tenant, w.delete_tuples, w.delete_limit + 1)
        partial = matching > w.delete_limit
        if partial and not w.allow_partial:
            raise DeleteLimitExceeded(w.delete_limit)
    if w.delete_tuples is not None:
        gone = await _delete_tuples(conn, tenant, w.delete_tuples, w.delete_limit)
        deleted = len(gone)
        changes += [pa.Change("delete", tuple=t) for t in gone]
    if w.delete_attributes is not None:
        where, params = attribute_where(w.delete_attributes)
        cur = await conn.execute(
            sql.SQL(
                "DELETE FROM authz_attributes WHERE tenant = %s AND {} "
                "RETURNING entity_type, entity_id, attribute, value"
            ).format(where),
            [tenant, *params],
        )
        changes += [
            pa.Change("delete", attribute=pa.Attribute(*r))
            for r in sorted(await cur.fetchall(), key=lambda r: r[:3])
        ]
    if not changes:
        return WriteResult(head_seq, 0, deleted, partial)
    datas = pa.change_records(tenant, source, changes, w.metadata)
    result = await topics.append(conn, topic, [NewRecord(d, None, None, None) for d in datas])
    assert result is not None  # the topic row is locked by this transaction
    return WriteResult(result.last_seq, len(changes), deleted, partial)


def _columns(tuples: list[pa.Tuple]) -> list[list[str]]:
    if not tuples:
        return [[]] * 6
    return [list(col) for col in zip(*(t.key() for t in tuples), strict=True)]


async def _tuple_ops(
    conn: AsyncConnection, tenant: str, ops: list[tuple[str, pa.Tuple]]
) -> list[pa.Change]:
    upserts = [t for op, t in ops if op != "delete"]
    deletes = [t for op, t in ops if op == "delete"]
    inserted: set[tuple] = set()
    if upserts:
        cur = await conn.execute(
            sql.SQL(
                "INSERT INTO authz_tuples (tenant, {}) SELECT %s, * FROM "
                + _UNNEST6
                + " ON CONFLICT DO NOTHING RETURNING {}"
            ).format(TUPLE_SELECT, TUPLE_SELECT),
            [tenant, *_columns(upserts)],
        )
        inserted = {tuple(r) for r in await cur.fetchall()}
    removed: set[tuple] = set()
    if deletes:
        cur = await conn.execute(
            sql.SQL(
                "DELETE FROM authz_tuples WHERE tenant = %s AND ({}) IN (SELECT * FROM "
                + _UNNEST6
                + ") RETURNING {}"
            ).format(TUPLE_SELECT, TUPLE_SELECT),
            [tenant, *_columns(deletes)],
        )
        removed = {tuple(r) for r in await cur.fetchall()}
    changes = []
    for op, t in ops:
        if op == "create" and t.key() not in inserted:
            raise TupleExists(t)
        if (op in ("create", "write", "touch") and t.key() in inserted) or (
            op == "delete" and t.key() in removed
        ):
            changes.append(pa.Change("create" if op == "write" else op, tuple=t))
    return changes


async def _write_attributes(
    conn: AsyncConnection, tenant: str, attrs: list[pa.Attribute]
) -> list[pa.Change]:
    """Upsert; a changed value is reported as DELETE(old) then CREATE(new), as Permify's watch
    reports an overwrite, an unchanged one not at all."""
    if not attrs:
        return []
    cols = [
        [a.entity_type for a in attrs],
        [a.entity_id for a in attrs],
        [a.name for a in attrs],
        [orjson.dumps(a.value).decode() for a in attrs],
    ]
    cur = await conn.execute(
        "WITH u AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
        "AS u(e, i, n, v)), old AS (SELECT a.entity_type, a.entity_id, a.attribute, a.value "
        "FROM authz_attributes a JOIN u ON (a.entity_type, a.entity_id, a.attribute) = "
        "(u.e, u.i, u.n) WHERE a.tenant = %s), "
        "ins AS (INSERT INTO authz_attributes (tenant, entity_type, entity_id, attribute, value) "
        "SELECT %s, e, i, n, v::jsonb FROM u ON CONFLICT (tenant, entity_type, entity_id, "
        "attribute) DO UPDATE SET value = EXCLUDED.value "
        "WHERE authz_attributes.value IS DISTINCT FROM EXCLUDED.value "
        "RETURNING entity_type, entity_id, attribute) "
        "SELECT ins.entity_type, ins.entity_id, ins.attribute, old.value FROM ins LEFT JOIN old "
        "USING (entity_type, entity_id, attribute)",
        [*cols, tenant, tenant],
    )
    changed = {tuple(r[:3]): r[3] for r in await cur.fetchall()}
    changes = []
    for a in attrs:
        key = (a.entity_type, a.entity_id, a.name)
        if key not in changed:
            continue
        if changed[key] is not None:
            old = dataclasses.replace(a, value=changed[key])
            changes.append(pa.Change("delete", attribute=old))
        changes.append(pa.Change("create", attribute=a))
    return changes


async def _delete_tuples(
    conn: AsyncConnection, tenant: str, f: pa.TupleFilter, limit: int | None
) -> list[pa.Tuple]:
    where, params = tuple_where(f)
    if limit:
        where = sql.SQL(
            "{} AND ({}) IN (SELECT {} FROM authz_tuples WHERE tenant = %s AND {} "
            "ORDER BY {} LIMIT %s)"
        ).format(where, TUPLE_SELECT, TUPLE_SELECT, where, TUPLE_SELECT)
        params = [*params, tenant, *params, limit]
    cur = await conn.execute(
        sql.SQL("DELETE FROM authz_tuples WHERE tenant = %s AND {} RETURNING {}").format(
            where, TUPLE_SELECT
        ),
        [tenant, *params],
    )
    return sorted((pa.Tuple(*r) for r in await cur.fetchall()), key=pa.Tuple.key)
