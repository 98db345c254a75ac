"""The one error middleware: every failure on every route becomes the contract's JSON body
``{"error": {"code", "message"}}``, with the status, code and headers the ``ApiError`` subclass
carries (``protocol.errors``). aiohttp's own HTTP exceptions (no route, wrong method, body over
the limit) are mapped onto those classes first, so they render the same way.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
import psycopg
import psycopg_pool
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from watch_service.protocol.errors import (
    ApiError,
    Forbidden,
    InvalidRequest,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    Throttled,
    Unauthorized,
    Unavailable,
)

log = logging.getLogger("auditsync.server")

MAX_BODY = web.AppKey("max_body_bytes", int)

_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (InvalidRequest, Unauthorized, Forbidden, NotAcceptable, Throttled, Unavailable)
}


def error_response(err: ApiError) -> web.Response:
    return web.Response(
        status=err.status,
        body=orjson.dumps(err.body()),
        content_type="application/json",
        headers=dict(err.headers),
    )


def _from_http(exc: web.HTTPException, request: web.Request) -> ApiError:
    """aiohttp's exception as the contract's: a status the contract has no class for becomes
    ``invalid_request`` (4xx) or ``internal`` (5xx), its reason kept in the message."""
    status = exc.status
    if status == 404:
        return NotFound(f"no route for {request.method} {request.path}")
    if status == 405:
        return MethodNotAllowed(
            f"method {request.method} is not allowed on {request.path}",
            sorted(getattr(exc, "allowed_methods", ()) or ()),
        )
    if status == 413:
        return PayloadTooLarge(f"body is over the limit of {request.app[MAX_BODY]} bytes")
    cls = _BY_STATUS.get(status) or (ApiError if status >= 500 else InvalidRequest)
    return cls(exc.reason or "request failed")


def as_api_error(exc: BaseException) -> ApiError:
    """The contract's error for any exception, in one place for responses and stream error
    frames: ours as they are; PostgreSQL gone (connection lost, pool exhausted) ``unavailable``
    with a message for people, not libpq's text; a body that broke off mid-chunk 400; anything
    else ``internal`` without its text (the log has it)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
        return Unavailable("PostgreSQL is unreachable or misconfigured; retry later")
    if isinstance(exc, RequestPayloadError):
        return InvalidRequest("the request body is malformed (bad chunking or length)")
    return ApiError("internal server error")


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
    except asyncio.CancelledError:
        raise
    except ConnectionResetError:
        raise
    except Exception as exc:
        mapped = as_api_error(exc)
        if isinstance(mapped, Unavailable):
            log.warning("database unavailable on %s %s: %s", request.method, request.path, exc)
        elif mapped.status >= 500:
            log.exception("internal error on %s %s", request.method, request.path)
        return error_response(mapped)
