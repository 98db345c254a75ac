"""Authentication before anything else (spec, "Further decisions"): with keys configured, a
request to any route but the public ones must present a known key before its handler runs, so
nothing about the request (an unknown wid, a malformed topic name, a missing route) is told to
a caller without one, and no work (the session GC, a database lookup) runs for it.

This only authenticates; each handler still authenticates and authorizes for its own scope
and topics. The Permify REST surface (``/v1/``) authenticates first in its own handler wrapper,
which answers in its own error shape, so it is left to that wrapper.
"""

from __future__ import annotations

from aiohttp import web

from watch_service.web.app_keys import KEYS

PUBLIC = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})
OWN_AUTH_PREFIX = "/v1/"  # Permify REST: authenticated first by its handler wrapper
STREAM_PREFIX = "/v0/watch/"  # the SSE GET, where ?token= is accepted (EventSource)


@web.middleware
async def authenticate_first(request: web.Request, handler) -> web.StreamResponse:
    keys = request.app[KEYS]
    path = request.path
    if keys.enabled and path not in PUBLIC and not path.startswith(OWN_AUTH_PREFIX):
        keys.authenticate(
            request.headers.get("Authorization"),
            request.query.get("token"),
            allow_query_token=request.method == "GET" and path.startswith(STREAM_PREFIX),
        )
    return await handler(request)
