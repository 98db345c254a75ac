"""Everything decided before a stream opens: validation and its exact error bodies, topic and
prefix checks, the session's key binding, Accept, expiry and GC, the stream cap, and the
clamps on the stored definition."""

from __future__ import annotations

import json

import pytest

from tests.support import unique

from .conftest import READER_PREFIX, Api, bearer, session_row
from .wire import HEARTBEAT, SSE, caught_up_frame, cursor_id, open_stream

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def post_watch(http, url: str, body, headers: dict | None = None) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    async with http.post(f"{url}/v0/watch", data=data, headers=headers) as r:
        return r.status, await r.read()


async def get_watch(
    http, url: str, wid: str, headers: dict | None = None, query: str = ""
) -> tuple[int, dict, dict]:
    async with http.get(f"{url}/v0/watch/{wid}{query}", headers=headers) as r:
        return r.status, dict(r.headers), await r.json()


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":")).encode()


async def test_257_topics_is_400_with_the_exact_body(service, http):
    body = {"topics": {f"t{i}": {} for i in range(257)}}
    assert await post_watch(http, service.url, body) == (
        400,
        error_body("invalid_request", "topics: more than 256 topics (got 257)"),
    )


async def test_256_topics_open_one_stream(api):
    topics = [await api.topic(unique("w.many")) for _ in range(256)]
    created = await api.watch({"topics": {t: {} for t in topics}})
    stream = await api.stream(created["wid"])
    seen = set()
    for _ in topics:
        raw = await stream.frame()
        seen.add(json.loads(raw.split(b"data: ", 1)[1])["topic"])
        assert b"event: caught-up\n" in raw
    assert seen == set(topics)
    stream.close()


@pytest.mark.parametrize(
    "body, message",
    [
        (b"not json", None),
        ({}, "topics: expected an object of topic -> options, got null"),
        ({"topics": []}, "topics: expected an object of topic -> options, got array"),
        ({"topics": {}}, "topics: at least one topic is required"),
        ({"topics": {"bad name": {}}}, None),
        ({"topics": {"t": {"from_seq": -1}}}, None),
        ({"topics": {"t": {"tail": "yes"}}}, None),
        ({"topics": {"t": {"nope": 1}}}, None),
        ({"topics": {"t": {}}, "consistency": "linearizable"}, None),
        ({"topics": {"t": {}}, "include_data": 1}, "include_data: expected a boolean, got integer"),
        ({"topics": {"t": {}}, "limit": 0}, None),
        ({"topics": {"t": {}}, "surprise": True}, None),
    ],
)
async def test_malformed_subscriptions_are_400(service, http, body, message):
    status, raw = await post_watch(http, service.url, body)
    doc = json.loads(raw)
    assert (status, doc["error"]["code"]) == (400, "invalid_request"), doc
    if message is not None:
        assert doc["error"]["message"] == message


async def test_unknown_or_deleted_topic_is_404_topic_not_found(api, service, http):
    known, gone = await api.topic(), await api.topic()
    await api.delete(gone)
    for missing in (unique("w.never"), gone):
        status, raw = await post_watch(http, service.url, {"topics": {known: {}, missing: {}}})
        assert (status, raw) == (
            404,
            error_body("topic_not_found", f"topic {missing!r} does not exist"),
        )


async def test_unknown_wid_is_404(service, http):
    status, _, doc = await get_watch(http, service.url, "wid_AAAAAAAAAAAAAAAAAAAAAA", SSE)
    assert status == 404 and doc["error"]["code"] == "not_found"


async def test_wrong_accept_is_406(api, service, http):
    wid = (await api.watch({"topics": {await api.topic(): {}}}))["wid"]
    for accept in ("application/json", "*/*"):
        status, _, doc = await get_watch(http, service.url, wid, {"Accept": accept})
        assert (status, doc) == (
            406,
            {"error": {"code": "not_acceptable", "message": "Accept must be text/event-stream"}},
        )


@pytest.fixture
async def auth(make_service, keys_file, http):
    svc = await make_service(keys_file=keys_file)
    return svc, Api(http, svc.url, bearer("admin"))


async def test_auth_binding_of_the_session(auth, http):
    svc, admin = auth
    topic = await admin.topic(unique(READER_PREFIX))
    outside = await admin.topic(unique("z."))
    await admin.append(topic, "x")

    # The POST: no key 401, ?token= refused on the POST, key outside its prefixes 403.
    status, raw = await post_watch(http, svc.url, {"topics": {topic: {}}})
    assert status == 401 and json.loads(raw)["error"]["code"] == "unauthorized"
    async with http.post(
        f"{svc.url}/v0/watch?token={bearer('reader')['Authorization'][7:]}",
        json={"topics": {topic: {}}},
    ) as r:
        assert r.status == 401
    status, raw = await post_watch(
        http, svc.url, {"topics": {topic: {}, outside: {}}}, bearer("reader")
    )
    assert (status, raw) == (
        403,
        error_body("forbidden", f"topic {outside!r} is outside the prefixes of key 'reader'"),
    )

    created = await Api(http, svc.url, bearer("reader")).watch({"topics": {topic: {}}})
    wid = created["wid"]
    # The GET: no key, a wrong secret, another valid key, another key via ?token=: all 401.
    for headers, query in [
        ({}, ""),
        ({"Authorization": "Bearer nope"}, ""),
        (bearer("other"), ""),
        ({}, "?token=secret-other-0003"),
        ({"Authorization": "Basic eDp5"}, ""),
    ]:
        status, hdrs, doc = await get_watch(http, svc.url, wid, {**SSE, **headers}, query)
        assert (status, doc["error"]["code"]) == (401, "unauthorized"), (headers, query)
        assert hdrs["WWW-Authenticate"] == "Bearer"
    # The creating key opens it, as a header or as ?token= (the EventSource fallback). Each
    # GET takes the session over from the last one (where it got to): rewind to the start.
    for headers, query in [(bearer("reader"), ""), ({}, "?token=secret-reader-0002")]:
        stream = await open_stream(
            http, svc.url, wid, headers=headers, query=query, last_event_id=cursor_id({topic: 0})
        )
        assert b"event: record\n" in await stream.frame()
        stream.close()


async def test_an_idle_session_is_reclaimed_and_an_open_one_never(api, service, http, db):
    """Both sessions look idle for an hour (their rows are backdated, rather than running a
    service with a tiny ttl whose GC would reclaim every other test's idle sessions too); the
    GC that runs on every POST and GET takes the idle one and leaves the one with a stream."""
    topic = await api.topic()
    idle = (await api.watch({"topics": {topic: {}}}))["wid"]
    busy = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    stream = await api.stream(busy)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    await db.execute(
        "UPDATE watch_sessions SET last_active_at = now() - interval '1 hour' WHERE wid = ANY(%s)",
        ([idle, busy],),
    )

    status, _, doc = await get_watch(http, service.url, idle, SSE)
    assert status == 404 and doc["error"] == {
        "code": "not_found",
        "message": f"watch session {idle!r} is unknown or expired; POST /v0/watch again",
    }
    assert await session_row(db, idle) is None
    await api.watch({"topics": {topic: {}}})  # the POST's GC pass
    assert (await session_row(db, busy))["leased"]
    await api.append(topic, "still streaming")
    assert b"event: record\n" in await stream.frame()
    stream.close()


async def test_the_stream_cap_is_429(make_service, http):
    svc = await make_service(max_streams=1)
    api = Api(http, svc.url)
    wid = (await api.watch({"topics": {await api.topic(): {}}}))["wid"]
    first = await api.stream(wid)
    status, headers, doc = await get_watch(http, svc.url, wid, SSE)
    assert (status, doc["error"]["code"]) == (429, "throttled")
    assert headers["Retry-After"] == "2"
    first.close()


@pytest.mark.parametrize(
    "given, stored",
    [
        ({}, {"limit": 256, "max_batch_bytes": 262144, "heartbeat_ms": 15000}),
        (
            {"heartbeat_ms": 10, "max_batch_bytes": 0},
            {"heartbeat_ms": 1000, "max_batch_bytes": 1 << 20},
        ),
        (
            {"heartbeat_ms": 10**9, "max_batch_bytes": 10**12, "limit": 2**32 - 1},
            {"heartbeat_ms": 60000, "max_batch_bytes": 8 << 20, "limit": 10000},
        ),
    ],
)
async def test_clamps_in_the_stored_definition(api, db, given, stored):
    wid = (await api.watch({"topics": {await api.topic(): {}}, **given}))["wid"]
    definition = (await session_row(db, wid))["definition"]
    assert {k: definition[k] for k in stored} == stored


async def test_clamps_in_behaviour(api):
    topic = await api.topic()
    await api.append(topic, *range(300))
    created = await api.watch({"topics": {topic: {}}, "heartbeat_ms": 10})
    stream = await api.stream(created["wid"])
    sizes = []
    for _ in range(2):  # the default limit of 256 per record frame
        raw = await stream.frame()
        sizes.append(len(json.loads(raw.split(b"data: ", 1)[1])["records"]))
    assert sizes == [256, 44]
    assert b"event: caught-up\n" in await stream.frame()
    # A 10 ms heartbeat is clamped to 1 s: nothing for most of a second, then one heartbeat.
    with pytest.raises(TimeoutError):
        await stream.frame(timeout=0.5)
    assert await stream.frame(timeout=2) == HEARTBEAT
    stream.close()
