"""The Permify REST surface (seed 000) on the service's HTTP port: tenancy, schema, data,
relationships and attributes (the watch is in ``permify_watch``).

Auth is the service's bearer keys (read / write / admin, prefix-checked against the tenant's
change topic). Errors are grpc-gateway bodies ``{"code", "message", "details"}``.
"""

from __future__ import annotations

import asyncio
import base64
import logging

import orjson
import psycopg
import psycopg_pool
from aiohttp import web

from watch_service.compat import permify_json as pj
from watch_service.protocol import authz as pa
from watch_service.protocol.errors import ApiError
from watch_service.store import authz_reads as reads
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import KEYS, POOL, SETTINGS
from watch_service.web.auth import authorize
from watch_service.web.json_body import read_json_body

log = logging.getLogger("auditsync.permify")
routes = web.RouteTableDef()


def permify_handler(scope: str, tenant_param: str | None = "tenant_id"):
    """Wrap a handler: auth + tenant id check first; every failure as a grpc-gateway body."""

    def wrap(fn):
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                tenant = None
                key = request.app[KEYS].authenticate(request.headers.get("Authorization"))
                if tenant_param is not None:
                    tenant = _tenant(request.match_info[tenant_param])
                authorize(key, scope, pa.change_topic(tenant) if tenant else None)
                return await fn(request, tenant)
            except pj.PermifyError as err:
                return _error(err)
            except ApiError as err:  # the key ring (401 / 403) or the body reader (408/413/415)
                return _api_error(err)
            except db.TenantNotFound as exc:
                return _error(pj.PermifyError(pj.NOT_FOUND, str(exc)))
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                log.warning("database unavailable on %s: %s", request.path, exc)
                return _error(pj.PermifyError(pj.UNAVAILABLE, "PostgreSQL is unreachable; retry"))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("internal error on %s %s", request.method, request.path)
                return _error(pj.PermifyError(pj.INTERNAL, "internal server error"))

        return run

    return wrap


def _tenant(raw: str) -> str:
    try:
        return pa.check_tenant(raw)
    except pa.AuthzInputError as exc:
        raise pj.invalid(str(exc)) from None


def _error(err: pj.PermifyError) -> web.Response:
    return web.Response(
        status=err.http_status, body=orjson.dumps(err.body()), content_type="application/json"
    )


def _api_error(err: ApiError) -> web.Response:
    """A service-wide error with its own HTTP status, in the grpc-gateway body."""
    code = _GRPC_CODE.get(err.status, pj.INVALID_ARGUMENT)
    body = pj.PermifyError(code, err.message).body()
    return web.Response(
        status=err.status,
        body=orjson.dumps(body),
        content_type="application/json",
        headers=dict(err.headers),
    )


# grpc-gateway has no status for 408 / 413 / 415: the HTTP status stays the service's.
_GRPC_CODE = {
    401: pj.UNAUTHENTICATED,
    403: pj.PERMISSION_DENIED,
    408: 4,  # DEADLINE_EXCEEDED
    413: 8,  # RESOURCE_EXHAUSTED
    503: pj.UNAVAILABLE,
}


def _ok(doc: dict) -> web.Response:
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


async def json_body(request: web.Request, allowed: set[str]) -> dict:
    return pj.parse_body(await read_json_body(request), allowed)


async def _write(request: web.Request, tenant: str, w: db.Write) -> web.Response:
    async with request.app[POOL].connection() as conn:
        result = await db.apply(conn, tenant, "permify", w, request.app[SETTINGS].authz_history_ms)
    return _ok({"snap_token": pa.encode_token(pa.change_topic(tenant), result.seq)})


# -- tenancy ---------------------------------------------------------------------------------
@routes.post("/v1/tenants/create")
@permify_handler("admin", None)
async def tenants_create(request: web.Request, _: None) -> web.Response:
    doc = await json_body(request, {"id", "name"})
    tenant = _tenant(doc.get("id"))
    if tenant == "*":
        raise pj.invalid("id: '*' is reserved and cannot be created")
    name = doc.get("name") or tenant
    if not isinstance(name, str):
        raise pj.invalid("name: expected a string")
    async with request.app[POOL].connection() as conn:
        try:
            row = await db.create_tenant(conn, tenant, name, request.app[SETTINGS].authz_history_ms)
        except db.TenantExists as exc:
            raise pj.PermifyError(pj.ALREADY_EXISTS, str(exc)) from None
    return _ok({"tenant": pj.tenant_body(row)})


@routes.post("/v1/tenants/list")
@permify_handler("read", None)
async def tenants_list(request: web.Request, _: None) -> web.Response:
    doc = await json_body(request, {"page_size", "continuous_token"})
    size, after = pj.page_size(doc), doc.get("continuous_token") or ""
    if not isinstance(after, str):
        raise pj.invalid("continuous_token: expected a string")
    async with request.app[POOL].connection() as conn:
        rows = await reads.list_tenants(conn, after, size + 1)
    token = rows[size - 1][0] if len(rows) > size else ""
    return _ok({"tenants": [pj.tenant_body(r) for r in rows[:size]], "continuous_token": token})


@routes.delete("/v1/tenants/{id}")
@permify_handler("admin", "id")
async def tenants_delete(request: web.Request, tenant: str) -> web.Response:
    async with request.app[POOL].connection() as conn:
        if not await db.delete_tenant(conn, tenant):
            raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
    return _ok({"tenant_id": tenant})


# -- schema ----------------------------------------------------------------------------------
@routes.post("/v1/tenants/{tenant_id}/schemas/write")
@permify_handler("write")
async def schemas_write(request: web.Request, tenant: str) -> web.Response:
    text = pj.check_schema((await json_body(request, {"schema"})).get("schema"))
    async with request.app[POOL].connection() as conn:
        version = await db.write_schema(conn, tenant, text)
    return _ok({"schema_version": version})


@routes.post("/v1/tenants/{tenant_id}/schemas/read")
@permify_handler("read")
async def schemas_read(request: web.Request, tenant: str) -> web.Response:
    meta = (await json_body(request, {"metadata"})).get("metadata") or {}
    version = meta.get("schema_version") or None if isinstance(meta, dict) else None
    async with request.app[POOL].connection() as conn:
        if not await reads.tenant_exists(conn, tenant):
            raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
        row = await reads.read_schema(conn, tenant, version)
    if row is None:
        raise pj.PermifyError(
            pj.NOT_FOUND,
            f"tenant {tenant!r} has no schema" + (f" version {version!r}" if version else ""),
        )
    return _ok({"schema": pj.schema_definition(row[1])})


# -- data ------------------------------------------------------------------------------------
@routes.post("/v1/tenants/{tenant_id}/data/write")
@permify_handler("write")
async def data_write(request: web.Request, tenant: str) -> web.Response:
    doc = await json_body(request, {"metadata", "tuples", "attributes"})
    tuples, attrs = pj.parse_tuples(doc, "tuples"), pj.parse_attributes(doc)
    if not tuples and not attrs:
        raise pj.invalid("body: tuples and attributes are both empty")
    return await _write(request, tenant, db.Write([("write", t) for t in tuples], attrs))


@routes.post("/v1/tenants/{tenant_id}/relationships/write")
@permify_handler("write")
async def relationships_write(request: web.Request, tenant: str) -> web.Response:
    doc = await json_body(request, {"metadata", "tuples"})
    tuples = pj.parse_tuples(doc, "tuples", min_items=1)
    return await _write(request, tenant, db.Write([("write", t) for t in tuples]))


@routes.post("/v1/tenants/{tenant_id}/data/delete")
@permify_handler("write")
async def data_delete(request: web.Request, tenant: str) -> web.Response:
    doc = await json_body(request, {"tuple_filter", "attribute_filter"})
    tf = pj.parse_tuple_filter(doc.get("tuple_filter"), "tuple_filter", require_type=False)
    af = pj.parse_attribute_filter(doc.get("attribute_filter"), "attribute_filter")
    if tf.is_empty() and af == pa.AttributeFilter():
        raise pj.invalid(
            "body: tuple_filter and attribute_filter are both empty; refusing to delete everything"
        )
    return await _write(
        request,
        tenant,
        db.Write(
            delete_tuples=None if tf.is_empty() else tf,
            delete_attributes=None if af == pa.AttributeFilter() else af,
        ),
    )


@routes.post("/v1/tenants/{tenant_id}/relationships/delete")
@permify_handler("write")
async def relationships_delete(request: web.Request, tenant: str) -> web.Response:
    doc = await json_body(request, {"filter"})
    tf = pj.parse_tuple_filter(doc.get("filter"), "filter", require_type=True)
    return await _write(request, tenant, db.Write(delete_tuples=tf))


def _after(token: object, parts: int) -> tuple | None:
    if not token:
        return None
    try:
        after = orjson.loads(base64.urlsafe_b64decode(str(token)))
        assert (
            isinstance(after, list)
            and len(after) == parts
            and all(isinstance(x, str) for x in after)
        )
        return tuple(after)
    except Exception:
        raise pj.invalid(f"continuous_token: {token!r} is not a token from this service") from None


def _next(key: tuple, more: bool) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode() if more else ""


@routes.post("/v1/tenants/{tenant_id}/data/relationships/read")
@permify_handler("read")
async def relationships_read(request: web.Request, tenant: str) -> web.Response:
    doc = await json_body(request, {"metadata", "filter", "page_size", "continuous_token"})
    f = pj.parse_tuple_filter(doc.get("filter"), "filter", require_type=False)
    size, after = pj.page_size(doc), _after(doc.get("continuous_token"), 6)
    async with request.app[POOL].connection() as conn:
        if not await reads.tenant_exists(conn, tenant):
            raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
        rows = await reads.read_tuples(conn, tenant, f, after, size + 1)
    page = rows[:size]
    return _ok(
        {
            "tuples": [pj.tuple_body(t) for t in page],
            "continuous_token": _next(page[-1].key() if page else (), len(rows) > size),
        }
    )


@routes.post("/v1/tenants/{tenant_id}/data/attributes/read")
@permify_handler("read")
async def attributes_read(request: web.Request, tenant: str) -> web.Response:
    doc = await json_body(request, {"metadata", "filter", "page_size", "continuous_token"})
    f = pj.parse_attribute_filter(doc.get("filter"), "filter")
    size, after = pj.page_size(doc), _after(doc.get("continuous_token"), 3)
    async with request.app[POOL].connection() as conn:
        if not await reads.tenant_exists(conn, tenant):
            raise db.TenantNotFound(f"tenant {tenant!r} does not exist")
        rows = await reads.read_attributes(conn, tenant, f, after, size + 1)
    page = rows[:size]
    last = (page[-1].entity_type, page[-1].entity_id, page[-1].name) if page else ()
    return _ok(
        {
            "attributes": [pj.attribute_body(a) for a in page],
            "continuous_token": _next(last, len(rows) > size),
        }
    )
