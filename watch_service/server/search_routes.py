"""``GET /v0/search``: ranked full text over the search index the sink and backfill keep.

Query parameters: ``q`` (required, 1..256 characters, web-search syntax), ``topic`` (optional:
one topic), ``limit`` (1..100, default 20), ``cursor`` (the ``next_cursor`` of the page before).
Auth: the ``read`` scope; with ``topic`` that topic must be within the key's prefixes, without
it only topics within them are searched. The cursor is opaque to clients: it holds the offset of
the next page and a digest of the query it belongs to, so it cannot be replayed on another one.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
from collections.abc import Mapping

import orjson
from aiohttp import web

from watch_service.protocol.errors import InvalidRequest
from watch_service.protocol.names import check_topic
from watch_service.protocol.requests import _query_int
from watch_service.server.topic_routes import caller, json_response
from watch_service.store import search_query
from watch_service.web.app_keys import POOL

routes = web.RouteTableDef()

MAX_Q_CHARS = 256
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_OFFSET = 10_000  # deep offsets cost a scan of every earlier hit; refine the query instead
ALLOWED = ("q", "topic", "limit", "cursor", "token")


@dataclasses.dataclass(frozen=True)
class SearchQuery:
    q: str
    topic: str | None
    limit: int
    offset: int


def _digest(q: str, topic: str | None) -> str:
    return hashlib.sha256(orjson.dumps([q, topic])).hexdigest()[:16]


def encode_cursor(q: str, topic: str | None, offset: int) -> str:
    raw = orjson.dumps({"o": offset, "d": _digest(q, topic)})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str, q: str, topic: str | None) -> int:
    """The offset ``cursor`` stands for; 400 unless this search returned it."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        doc = orjson.loads(raw)
        offset = doc["o"]
        ok = isinstance(offset, int) and 0 < offset <= MAX_OFFSET and doc["d"] == _digest(q, topic)
    except (binascii.Error, ValueError, orjson.JSONDecodeError, KeyError, TypeError):
        ok = False
    if not ok:
        raise InvalidRequest("cursor: not a cursor returned by this search (same q and topic)")
    return offset


def search_query_params(query: Mapping[str, str]) -> SearchQuery:
    """The checked parameters of one search request."""
    unknown = sorted(set(query) - set(ALLOWED))
    if unknown:
        raise InvalidRequest(
            f"query: unknown parameter(s) {', '.join(unknown)} (allowed: q, topic, limit, cursor)"
        )
    q = query.get("q")
    if q is None or not q.strip():
        raise InvalidRequest("q: required, the text to search for")
    if len(q) > MAX_Q_CHARS:
        raise InvalidRequest(f"q: {len(q)} characters is over the limit of {MAX_Q_CHARS}")
    topic = query.get("topic")
    if topic is not None:
        topic = check_topic(topic)
    limit = _query_int(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    cursor = query.get("cursor")
    offset = 0 if cursor is None else decode_cursor(cursor, q, topic)
    return SearchQuery(q, topic, limit, offset)


@routes.get("/v0/search")
async def search(request: web.Request) -> web.Response:
    params = search_query_params(request.query)
    key = caller(request, "read", params.topic)
    prefixes = None if key is None else key.prefixes
    async with request.app[POOL].connection() as conn:
        hits, more = await search_query.search(
            conn,
            params.q,
            topic=params.topic,
            prefixes=prefixes,
            limit=params.limit,
            offset=params.offset,
        )
    next_offset = params.offset + len(hits)
    next_cursor = (
        encode_cursor(params.q, params.topic, next_offset)
        if more and next_offset <= MAX_OFFSET
        else None
    )
    return json_response(
        {
            "q": params.q,
            "results": [
                {
                    "topic": h.topic,
                    "$seq": h.seq,
                    "$ts": h.ts,
                    "$tag": h.tag,
                    "key": h.doc_key,
                    "rank": h.rank,
                    # the stored JSON as it is: numbers keep their exact digits
                    "data": orjson.Fragment(h.data),
                }
                for h in hits
            ],
            "next_cursor": next_cursor,
        }
    )
