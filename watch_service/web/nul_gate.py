"""Request lines and headers without NUL: a query string value (``/v0/search?q=``, a topic
read's ``from_seq``) or a header value that holds U+0000 is refused here, before any handler,
with the contract's 400 (``protocol.nul``), so none reaches SQL for PostgreSQL to refuse with
a 500. Path segments are not checked here: each is a name whose own rule (topic, tenant, wid)
already refuses a NUL with its own message.
"""

from __future__ import annotations

from aiohttp import web

from watch_service.protocol import nul
from watch_service.protocol.errors import InvalidRequest


def nul_in_request(request: web.Request) -> str | None:
    """Where ``request`` holds a NUL outside its path and body (None if nowhere)."""
    for key, value in request.query.items():
        if nul.NUL in key or nul.NUL in value:
            return f"query parameter {key!r}"
    for name, value in request.headers.items():
        if nul.NUL in value:
            return f"header {name}"
    return None


@web.middleware
async def refuse_nul(request: web.Request, handler) -> web.StreamResponse:
    where = nul_in_request(request)
    if where is not None:
        raise InvalidRequest(nul.message(where))
    return await handler(request)
