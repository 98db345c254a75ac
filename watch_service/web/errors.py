"""The one error middleware: every failure on every route becomes the contract's JSON body."""
from __future__ import annotations

import asyncio
import logging

import orjson
import psycopg
import psycopg_pool
from aiohttp import web

from watch_service.protocol.errors import ApiError

log = logging.getLogger("auditsync.server")

_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 406: "not_acceptable", 413: "payload_too_large",
               429: "throttled", 503: "unavailable"}


def error_response(err: ApiError) -> web.Response:
    return web.Response(status=err.status, body=orjson.dumps(err.body()),
                        content_type="application/json", headers=err.headers)


def _from_http(exc: web.HTTPException, request: web.Request) -> ApiError:
    status = exc.status
    if status == 404:
        message = f"no route for {request.method} {request.path}"
    elif status == 405:
        allowed = sorted(getattr(exc, "allowed_methods", ()) or ())
        message = f"method {request.method} is not allowed on {request.path}"
        err = ApiError(405, "method_not_allowed", message, {"Allow": ", ".join(allowed)})
        return err
    elif status == 413:
        message = f"body is over the limit of {request.app[MAX_BODY]} bytes"
    else:
        message = exc.reason or "request failed"
    return ApiError(status, _HTTP_CODES.get(status, "internal" if status >= 500 else "invalid_request"),
                    message)


MAX_BODY = web.AppKey("max_body_bytes", int)


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as err:
        return error_response(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(_from_http(exc, request))
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
        log.warning("database unavailable on %s %s: %s", request.method, request.path, exc)
        return error_response(ApiError(503, "unavailable", "PostgreSQL is unreachable or "
                                       "misconfigured; retry later"))
    except asyncio.CancelledError:
        raise
    except ConnectionResetError:
        raise
    except Exception:
        log.exception("internal error on %s %s", request.method, request.path)
        return error_response(ApiError(500, "internal", "internal server error"))
