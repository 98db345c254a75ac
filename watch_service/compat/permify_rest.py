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
from watch_service.web.json_body import read_json_body

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


async def json_body(request: web.Request) -> dict:
    return pj.parse_body(await read_json_body(request))


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
