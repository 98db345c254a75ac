"""The Permify REST surface (seed 000) on the service's HTTP port: tenancy, schema, data,
relationships and attributes (the watch is in ``permify_watch``). Each route is the
grpc-gateway form of a ``permify_ops`` operation: the JSON body (proto field names; unknown
fields ignored) in, the operation's document out.

Auth is the service's bearer keys (read / write / admin, prefix-checked against the tenant's
change topic). Errors are grpc-gateway bodies ``{"code", "message", "details"}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import orjson
import psycopg
import psycopg_pool
from aiohttp import web

from watch_service.compat import permify_json as pj
from watch_service.compat import permify_ops as ops
from watch_service.protocol.errors import ApiError
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import KEYS, POOL, SETTINGS

log = logging.getLogger("auditsync.permify")
routes = web.RouteTableDef()
Handler = Callable[[web.Request, ops.Ctx, str | None], Awaitable[web.StreamResponse]]


def permify_handler(tenant_param: str | None = "tenant_id") -> Callable[[Handler], Callable]:
    """Wrap a handler: authentication and the tenant id first; every failure as a
    grpc-gateway body. Scopes are checked by the operation."""

    def wrap(fn: Handler) -> Callable:
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                key = request.app[KEYS].authenticate(request.headers.get("Authorization"))
                ctx = ops.Ctx(request.app[POOL], request.app[SETTINGS], key)
                tenant = None
                if tenant_param is not None:
                    tenant = ops.tenant_of(request.match_info[tenant_param])
                return await fn(request, ctx, tenant)
            except pj.PermifyError as err:
                return _error(err)
            except ApiError as err:  # from the key ring: 401 / 403
                code = pj.UNAUTHENTICATED if err.status == 401 else pj.PERMISSION_DENIED
                return _error(pj.PermifyError(code, err.message))
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


def _error(err: pj.PermifyError) -> web.Response:
    return web.Response(
        status=err.http_status, body=orjson.dumps(err.body()), content_type="application/json"
    )


def _ok(doc: dict) -> web.Response:
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


async def json_body(request: web.Request) -> dict:
    limit = request.app[SETTINGS].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise pj.invalid(
            f"body of {request.content_length} bytes is over the limit of {limit} bytes"
        )
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise pj.invalid(f"body is over the limit of {limit} bytes") from None
    return pj.parse_body(raw)


def _route(path: str, op: Callable[..., Awaitable[dict]], tenant_param: str | None) -> None:
    """POST ``path`` → ``op(ctx, [tenant,] body)``."""

    @permify_handler(tenant_param)
    async def handler(request: web.Request, ctx: ops.Ctx, tenant: str | None) -> web.Response:
        doc = await json_body(request)
        return _ok(await (op(ctx, doc) if tenant is None else op(ctx, tenant, doc)))

    routes.post(path)(handler)


_route("/v1/tenants/create", ops.tenants_create, None)
_route("/v1/tenants/list", ops.tenants_list, None)
_route("/v1/tenants/{tenant_id}/schemas/write", ops.schemas_write, "tenant_id")
_route("/v1/tenants/{tenant_id}/schemas/read", ops.schemas_read, "tenant_id")
_route("/v1/tenants/{tenant_id}/schemas/list", ops.schemas_list, "tenant_id")
_route("/v1/tenants/{tenant_id}/data/write", ops.data_write, "tenant_id")
_route("/v1/tenants/{tenant_id}/relationships/write", ops.relationships_write, "tenant_id")
_route("/v1/tenants/{tenant_id}/data/delete", ops.data_delete, "tenant_id")
_route("/v1/tenants/{tenant_id}/relationships/delete", ops.relationships_delete, "tenant_id")
_route("/v1/tenants/{tenant_id}/data/relationships/read", ops.relationships_read, "tenant_id")
_route("/v1/tenants/{tenant_id}/data/attributes/read", ops.attributes_read, "tenant_id")


@routes.delete("/v1/tenants/{id}")
@permify_handler("id")
async def tenants_delete(request: web.Request, ctx: ops.Ctx, tenant: str | None) -> web.Response:
    assert tenant is not None
    return _ok(await ops.tenants_delete(ctx, tenant))
