"""CORS for browser clients on another origin (``AUDITSYNC_CORS_ORIGINS``; default off).

With origins configured, a request whose ``Origin`` is one of them (or any, with ``*``) gets
``Access-Control-Allow-Origin`` naming it on every response, streams and errors included (set
as the response is prepared), and a preflight ``OPTIONS`` is answered 204 before routing and
auth (browsers send no credentials on a preflight). Keys travel in the ``Authorization``
header, not cookies, so credentials mode is not needed. Other origins get no CORS headers and
the browser keeps its same-origin rule.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from watch_service.web.auth_gate import authenticate_first

ALLOW_METHODS = "GET, POST, PUT, DELETE"
ALLOW_HEADERS = "Authorization, Content-Type, Accept, Last-Event-ID"
EXPOSE_HEADERS = "Retry-After, Allow"
MAX_AGE_S = "600"
_ORIGINS = web.AppKey("cors_origins", frozenset)


def allowed(origins: frozenset[str], origin: str | None) -> bool:
    return origin is not None and ("*" in origins or origin in origins)


@web.middleware
async def _preflight(request: web.Request, handler) -> web.StreamResponse:
    origin = request.headers.get(hdrs.ORIGIN)
    if (
        request.method == hdrs.METH_OPTIONS
        and hdrs.ACCESS_CONTROL_REQUEST_METHOD in request.headers
        and allowed(request.app[_ORIGINS], origin)
    ):
        return web.Response(
            status=204,
            headers={
                hdrs.ACCESS_CONTROL_ALLOW_METHODS: ALLOW_METHODS,
                hdrs.ACCESS_CONTROL_ALLOW_HEADERS: ALLOW_HEADERS,
                hdrs.ACCESS_CONTROL_MAX_AGE: MAX_AGE_S,
            },
        )
    return await handler(request)


async def _allow_origin(request: web.Request, response: web.StreamResponse) -> None:
    origin = request.headers.get(hdrs.ORIGIN)
    if allowed(request.app[_ORIGINS], origin):
        assert origin is not None
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
        response.headers[hdrs.ACCESS_CONTROL_EXPOSE_HEADERS] = EXPOSE_HEADERS
    # Responses differ by Origin, so a cache must key on it.
    response.headers.add(hdrs.VARY, hdrs.ORIGIN)


def install(app: web.Application, origins: tuple[str, ...]) -> None:
    """Answer preflights and label responses for ``origins``; nothing at all when empty."""
    if not origins:
        return
    app[_ORIGINS] = frozenset(origins)
    # Before authentication: a browser's preflight never carries credentials.
    gate = next((i for i, m in enumerate(app.middlewares) if m is authenticate_first), None)
    app.middlewares.insert(len(app.middlewares) if gate is None else gate, _preflight)
    app.on_response_prepare.append(_allow_origin)
