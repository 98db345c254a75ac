"""Topics and Records routes of ``spec/http-api.md``."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from watch_service.protocol import requests as rq
from watch_service.protocol.authz import is_change_topic
from watch_service.protocol.errors import Forbidden, TopicNotFound
from watch_service.protocol.names import check_topic
from watch_service.protocol.records import encode_list
from watch_service.store import topics as store
from watch_service.web.app_keys import APPENDER, KEYS, METRICS, POOL, SETTINGS
from watch_service.web.auth import authorize
from watch_service.web.handoff import HANDOFF_TO
from watch_service.web.json_body import read_json_body

# aiohttp tries the routes under one path prefix in the order they were added, and a path's
# methods share one resource only when added one after another: the appends come first.
routes = web.RouteTableDef()


def json_response(doc: dict, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(doc), content_type="application/json")


def caller(request: web.Request, scope: str, topic: str | None = None):
    key = request.app[KEYS].authenticate(
        request.headers.get("Authorization"), request.query.get("token")
    )
    authorize(key, scope, topic)
    if scope != "read" and topic is not None and is_change_topic(topic):
        raise Forbidden(
            f"topic {topic!r} is a tenant's authorization change topic: only the authorization "
            "engine writes it (use the Permify or SpiceDB API); the topics API may read it"
        )
    return key


@routes.post("/v0/topics/{topic}/records")
async def append_records(request: web.Request) -> web.Response:
    name = check_topic(request.match_info["topic"])
    caller(request, "write", name)
    records = rq.new_records(await read_json_body(request), request.app[SETTINGS].max_record_bytes)
    metrics = request.app[METRICS]
    started = time.perf_counter()
    try:
        result = await request.app[APPENDER].append(name, records)
    finally:
        metrics.append_duration.observe(time.perf_counter() - started)
    if result is None:
        raise TopicNotFound(name)
    metrics.appends.inc()
    metrics.records_appended.inc(len(records))
    relay = request.app[APPENDER].relay
    if relay is not None and (owner := relay.elsewhere(name)) is not None:
        request[HANDOFF_TO] = owner  # once answered, the connection goes to the owner
    return json_response(
        {
            "topic": name,
            "first_seq": result.first_seq,
            "last_seq": result.last_seq,
            "head_seq": result.head_seq,
            "ts": result.ts,
        }
    )


@routes.get("/v0/topics/{topic}/records")
async def read_records(request: web.Request) -> web.Response:
    name = check_topic(request.match_info["topic"])
    caller(request, "read", name)
    query = rq.read_query(request.query)
    async with request.app[POOL].connection() as conn:
        result = await store.read(conn, name, query.from_seq, query.limit)
    if result is None:
        raise TopicNotFound(name)
    head = orjson.dumps({"topic": name})[:-1].decode()
    tail: dict[str, object] = {
        "from_seq": result.from_seq,
        "to_seq": result.to_seq,
        "head_seq": result.head_seq,
        "earliest_seq": result.earliest_seq,
    }
    if result.tombstone is not None:
        tail["tombstone"] = result.tombstone.as_dict()
    body = (
        head + ',"records":' + encode_list(result.records) + "," + orjson.dumps(tail).decode()[1:]
    )
    return web.Response(body=body.encode(), content_type="application/json")


@routes.put("/v0/topics/{topic}")
async def put_topic(request: web.Request) -> web.Response:
    name = check_topic(request.match_info["topic"])
    caller(request, "admin", name)
    cfg = rq.topic_config(await read_json_body(request))
    async with request.app[POOL].connection() as conn:
        topic, created = await store.put_topic(conn, name, cfg)
    return json_response(topic.as_dict(), 201 if created else 200)


@routes.get("/v0/topics/{topic}")
async def get_topic(request: web.Request) -> web.Response:
    name = check_topic(request.match_info["topic"])
    caller(request, "read", name)
    async with request.app[POOL].connection() as conn:
        topic = await store.get_topic(conn, name)
    if topic is None:
        raise TopicNotFound(name)
    return json_response(topic.as_dict())


@routes.delete("/v0/topics/{topic}")
async def delete_topic(request: web.Request) -> web.Response:
    name = check_topic(request.match_info["topic"])
    caller(request, "admin", name)
    async with request.app[POOL].connection() as conn:
        head = await store.delete_topic(conn, name)
    if head is None:
        raise TopicNotFound(name)
    return json_response({"topic": name, "head_seq": head})


@routes.get("/v0/topics")
async def list_topics(request: web.Request) -> web.Response:
    key = request.app[KEYS].authenticate(
        request.headers.get("Authorization"), request.query.get("token")
    )
    async with request.app[POOL].connection() as conn:
        topics = await store.list_topics(conn)
    if key is not None:
        topics = [t for t in topics if "read" in key.scopes and key.may_touch(t.name)]
    return json_response({"topics": [t.as_dict() for t in topics]})
