"""The Permify operations, one engine under two transports: the REST surface
(``permify_rest``, ``permify_watch``) and gRPC (``permify_grpc``) both hand each call here as
a request document with Permify's proto field names (the REST body as sent; the gRPC request
through ``json_format.MessageToDict``) and render the returned document (``ParseDict`` for
gRPC). Errors are ``permify_json.PermifyError`` with a gRPC status code. The Watch is in
``permify_stream``.

Writes are validated against the tenant's current Permify schema (or the
``metadata.schema_version`` named) the way Permify's data server does
(internal/servers/data_server.go): no schema → ERROR_CODE_SCHEMA_NOT_FOUND, and the checks of
``protocol.permify_schema``.
"""

from __future__ import annotations

import base64
import dataclasses
import logging

import orjson
from psycopg_pool import AsyncConnectionPool

from watch_service.compat import permify_json as pj
from watch_service.protocol import authz as pa
from watch_service.protocol import permify_schema as ps
from watch_service.protocol import permify_validation as pv
from watch_service.settings import Settings
from watch_service.store import authz_reads as reads
from watch_service.store import authz_schemas as schemas
from watch_service.store import authz_writes as db
from watch_service.web.auth import Key, authorize

log = logging.getLogger("auditsync.permify")
DIALECT = "permify"


@dataclasses.dataclass(frozen=True)
class Ctx:
    """What one call runs with: the pool, the settings and the caller's key (None = dev)."""

    pool: AsyncConnectionPool
    settings: Settings
    key: Key | None


def tenant_of(raw: object, field: str = "tenant_id") -> str:
    try:
        return pa.check_tenant(raw, field)
    except pa.AuthzInputError as exc:
        raise pj.invalid(str(exc)) from None


def allow(ctx: Ctx, scope: str, tenant: str | None) -> None:
    """Raise PERMISSION_DENIED unless the key has ``scope`` on the tenant's change topic."""
    try:
        authorize(ctx.key, scope, pa.change_topic(tenant) if tenant else None)
    except Exception as exc:  # web.auth raises the HTTP Forbidden
        raise pj.PermifyError(pj.PERMISSION_DENIED, str(getattr(exc, "message", exc))) from None


def _schema_error(exc: ps.SchemaError) -> pj.PermifyError:
    return pj.PermifyError(exc.grpc_code, exc.message)


# -- tenancy ---------------------------------------------------------------------------------
async def tenants_create(ctx: Ctx, doc: dict) -> dict:
    tenant = pj.new_tenant_id(doc.get("id"))
    name = pj.text(doc, "name", "") or tenant
    allow(ctx, "admin", tenant)
    async with ctx.pool.connection() as conn:
        try:
            row = await db.create_tenant(conn, tenant, name, ctx.settings.authz_history_ms)
        except db.TenantExists as exc:
            raise pj.PermifyError(pj.ALREADY_EXISTS, str(exc)) from None
    return {"tenant": pj.tenant_body(row)}


async def tenants_list(ctx: Ctx, doc: dict) -> dict:
    """Tenants in id order; a key sees only the tenants its prefixes cover."""
    allow(ctx, "read", None)
    size, after = pj.page_size(doc), pj.text(doc, "continuous_token", "")
    out: list[tuple] = []
    more = False
    async with ctx.pool.connection() as conn:
        while True:
            rows = await reads.list_tenants(conn, after, size + 1)
            for row in rows:
                if ctx.key is None or ctx.key.may_touch(pa.change_topic(row[0])):
                    if len(out) == size:
                        more = True
                        break
                    out.append(row)
            if more or len(rows) <= size:
                break
            after = rows[-1][0]
    token = out[-1][0] if more else ""
    return {"tenants": [pj.tenant_body(r) for r in out], "continuous_token": token}


async def tenants_delete(ctx: Ctx, tenant: str) -> dict:
    allow(ctx, "admin", tenant)
    async with ctx.pool.connection() as conn:
        if not await db.delete_tenant(conn, tenant):
            raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
    return {"tenant_id": tenant}


# -- schema ----------------------------------------------------------------------------------
async def schemas_write(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "write", tenant)
    text = pj.text(doc, "schema", "")
    try:
        defs = ps.parse(text)
    except ps.SchemaError as exc:  # Permify answers these INTERNAL; a 4xx is what they are
        raise pj.invalid(exc.message) from None
    async with ctx.pool.connection() as conn:
        stored = await schemas.write_schema(
            conn, tenant, DIALECT, text, defs, ctx.settings.authz_history_ms
        )
    return {"schema_version": stored.version}


async def _definitions(conn, tenant: str, version: str) -> tuple[str, dict]:
    if not await reads.tenant_exists(conn, tenant):
        raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
    stored = await schemas.read_schema(conn, tenant, DIALECT, version or None)
    if stored is None:
        detail = f"tenant {tenant!r} has no schema" + (f" version {version!r}" if version else "")
        raise pj.PermifyError(pj.NOT_FOUND, f"ERROR_CODE_SCHEMA_NOT_FOUND: {detail}")
    defs = stored.definitions
    if defs is None:  # written before migration 009
        try:
            defs = ps.parse(stored.source)
        except ps.SchemaError:
            defs = {"entities": {}, "rules": {}}
    return stored.version, defs


async def schemas_read(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "read", tenant)
    version = pj.text(pj.obj(doc, "metadata"), "schema_version", "metadata")
    async with ctx.pool.connection() as conn:
        _, defs = await _definitions(conn, tenant, version)
    return {"schema": pj.schema_body(defs)}


async def schemas_list(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "read", tenant)
    size, after = pj.page_size(doc), pj.text(doc, "continuous_token", "")
    async with ctx.pool.connection() as conn:
        head, _ = await _definitions(conn, tenant, "")
        rows = await schemas.list_schemas(conn, tenant, DIALECT, after or None, size + 1)
    page = rows[:size]
    return {
        "head": head,
        "schemas": [{"version": v, "created_at": pj.stamp(c)} for v, c in page],
        "continuous_token": page[-1][0] if len(rows) > size else "",
    }


# -- data ------------------------------------------------------------------------------------
async def _write(ctx: Ctx, tenant: str, w: db.Write, version: str | None = None) -> dict:
    async with ctx.pool.connection() as conn:
        if version is not None:
            _, defs = await _definitions(conn, tenant, version)
            try:
                for _, t in w.tuple_ops:
                    pv.validate_tuple(defs, t)
                for a in w.attributes:
                    pv.validate_attribute(defs, a)
            except ps.SchemaError as exc:
                raise _schema_error(exc) from None
        result = await db.apply(conn, tenant, DIALECT, w, ctx.settings.authz_history_ms)
    topic = pa.change_topic(tenant)
    return {"snap_token": pa.encode_token(topic, result.seq, result.epoch)}


def _version(doc: dict) -> str:
    return pj.text(pj.obj(doc, "metadata"), "schema_version", "metadata")


async def data_write(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "write", tenant)
    tuples, attrs = pj.parse_tuples(doc, "tuples"), pj.parse_attributes(doc)
    pj.check_write_size(len(tuples) + len(attrs))
    w = db.Write([("write", t) for t in tuples], attrs)
    return await _write(ctx, tenant, w, _version(doc))


async def relationships_write(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "write", tenant)
    tuples = pj.parse_tuples(doc, "tuples", min_items=1)
    pj.check_write_size(len(tuples))
    return await _write(ctx, tenant, db.Write([("write", t) for t in tuples]), _version(doc))


async def data_delete(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "write", tenant)
    tf = pj.parse_tuple_filter(doc.get("tuple_filter"), "tuple_filter", require_type=False)
    af = pj.parse_attribute_filter(doc.get("attribute_filter"), "attribute_filter")
    if tf.is_empty() and af == pa.AttributeFilter():  # internal/validation ValidateFilters
        raise pj.invalid(
            "ERROR_CODE_VALIDATION: tuple_filter and attribute_filter are both empty; "
            "refusing to delete everything"
        )
    w = db.Write(
        delete_tuples=None if tf.is_empty() else tf,
        delete_attributes=None if af == pa.AttributeFilter() else af,
    )
    return await _write(ctx, tenant, w)


async def relationships_delete(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "write", tenant)
    tf = pj.parse_tuple_filter(doc.get("filter"), "filter", require_type=True)
    return await _write(ctx, tenant, db.Write(delete_tuples=tf))


def _after(doc: dict, parts: int) -> tuple | None:
    token = pj.text(doc, "continuous_token", "")
    if not token:
        return None
    try:
        after = orjson.loads(base64.urlsafe_b64decode(token))
        ok = isinstance(after, list) and len(after) == parts
        if ok and all(isinstance(x, str) for x in after):
            # what the token decodes to goes to SQL, like the body it came in
            return tuple(pj.check_no_nul(after, "continuous_token"))
    except ValueError:
        pass
    raise pj.invalid(f"continuous_token: {token!r} is not a token from this service")


def _next(key: tuple, more: bool) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode() if more else ""


async def relationships_read(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "read", tenant)
    f = pj.parse_tuple_filter(doc.get("filter"), "filter", require_type=False)
    size, after = pj.page_size(doc), _after(doc, 6)
    async with ctx.pool.connection() as conn:
        if not await reads.tenant_exists(conn, tenant):
            raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
        rows = await reads.read_tuples(conn, tenant, f, after, size + 1)
    page = rows[:size]
    return {
        "tuples": [pj.tuple_body(t) for t in page],
        "continuous_token": _next(page[-1].key() if page else (), len(rows) > size),
    }


async def attributes_read(ctx: Ctx, tenant: str, doc: dict) -> dict:
    allow(ctx, "read", tenant)
    f = pj.parse_attribute_filter(doc.get("filter"), "filter")
    size, after = pj.page_size(doc), _after(doc, 3)
    async with ctx.pool.connection() as conn:
        if not await reads.tenant_exists(conn, tenant):
            raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
        rows = await reads.read_attributes(conn, tenant, f, after, size + 1)
    page = rows[:size]
    last = (page[-1].entity_type, page[-1].entity_id, page[-1].name) if page else ()
    return {
        "attributes": [pj.attribute_body(a) for a in page],
        "continuous_token": _next(last, len(rows) > size),
    }
