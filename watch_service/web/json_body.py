"""Reading a JSON request body, the one way every JSON route does it (topics, watch, Permify):
the media type first (415: a form or ``text/plain`` post from any web page must not append),
then the size (413), then the bytes within the body read timeout (408). Parsing stays with the
route's own pure parser (``protocol.requests``, ``compat.permify_json``), which answers 400.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from watch_service.protocol.errors import PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from watch_service.web.app_keys import SETTINGS

JSON = "application/json"


def check_media_type(request: web.Request) -> None:
    """415 unless the body is ``application/json`` (parameters such as ``charset`` allowed).
    An empty body has no type to check: ``PUT /v0/topics/{t}`` may omit it."""
    if not request.body_exists or request.content_length == 0:
        return
    if request.content_type != JSON:
        got = request.headers.get("Content-Type", "")
        raise UnsupportedMediaType(
            f"Content-Type must be {JSON}, got {got!r}" if got else f"Content-Type must be {JSON}"
        )


async def read_json_body(request: web.Request) -> bytes:
    """The raw body of a JSON route, checked for media type and size, read within
    ``settings.body_timeout_s``."""
    check_media_type(request)
    settings = request.app[SETTINGS]
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"body of {request.content_length} bytes is over the limit of {limit} bytes"
        )
    if request.content.is_eof():
        # It came with the header: take what is buffered, without ``read``'s awaits (two
        # reads of the stream, the second for its end; 9 % of an append request's Python).
        body = request.content.read_nowait()
        if len(body) > limit:  # a chunked body says its size only now
            raise PayloadTooLarge(f"body is over the limit of {limit} bytes")
        return body
    try:
        async with asyncio.timeout(settings.body_timeout_s):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"body is over the limit of {limit} bytes") from None
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {settings.body_timeout_s:g} s"
        ) from None
