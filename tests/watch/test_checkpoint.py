"""A session too large for inline ids: 256 topics of 200-character names. Every frame's id is a
checkpoint token of at most 4 KiB, and every id, sent back as ``Last-Event-ID``, resumes
exactly: on the same service, on another service instance on the same database, and on a
service started after the first one stopped. A malformed token is a 400 with the contract body.
"""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from tests.support import InProcessService, unique, wait_for

from .conftest import Api, session_row
from .wire import SSE, checkpoint_id, compact, fields, wire_record

pytestmark = [pytest.mark.service, pytest.mark.pg]

TOPICS = 256
FILLED = 8  # topics that get records (1..3 each); the others stay empty


def id_by_hand(cursors: dict[str, int]) -> str:
    """The frame id the contract allows: the inline map up to 4 KiB, else a checkpoint token."""
    inline = base64.urlsafe_b64encode(compact(cursors).encode()).rstrip(b"=").decode()
    return inline if len(inline) <= 4096 else checkpoint_id(cursors)


def sse(event: str, data: str, cursors: dict[str, int]) -> bytes:
    return f"id: {id_by_hand(cursors)}\nevent: {event}\ndata: {data}\n\n".encode()


async def drain_all(stream, cursors: dict[str, int], records: dict[str, list[dict]]) -> list:
    """Read the stream until every topic is caught up, checking each frame's exact bytes
    against the model map (topics interleave in any order). Returns (id, map) per frame."""
    cursors = dict(cursors)
    heads = {t: (recs[-1]["$seq"] if recs else 0) for t, recs in records.items()}
    caught_up: set[str] = set()
    seen = []
    while len(caught_up) < len(cursors):
        raw = await stream.frame()
        topic = json.loads(fields(raw)["data"])["topic"]
        after = cursors[topic]
        if after < heads[topic]:
            recs = [r for r in records[topic] if r["$seq"] > after]
            cursors[topic] = heads[topic]
            body = (
                f'{{"topic":{compact(topic)},"records":[{",".join(map(wire_record, recs))}],'
                f'"from_seq":{after},"to_seq":{heads[topic]},"head_seq":{heads[topic]}}}'
            )
            assert raw == sse("record", body, cursors), topic
        else:
            assert topic not in caught_up
            caught_up.add(topic)
            body = f'{{"topic":{compact(topic)},"head_seq":{heads[topic]}}}'
            assert raw == sse("caught-up", body, cursors), topic
        seen.append((fields(raw)["id"], dict(cursors)))
    return seen


async def make_session(api: Api, topics: int, filled: int) -> tuple[str, dict]:
    """A session over ``topics`` topics of 200-character names, the first ``filled`` of them
    with 1..3 records; (wid, records per topic in session order)."""
    stem = unique("w.ck")
    names = [f"{stem}-{i:03d}-".ljust(200, "n") for i in range(topics)]
    for chunk in range(0, topics, 32):
        await asyncio.gather(*(api.topic(n) for n in names[chunk : chunk + 32]))
    for i, name in enumerate(names[:filled]):
        await api.append(name, *[{"data": {"i": i, "k": k}} for k in range(1 + i % 3)])
    records = {n: (await api.records(n) if i < filled else []) for i, n in enumerate(names)}
    wid = (await api.watch({"topics": {n: {"from_seq": 0} for n in names}}))["wid"]
    return wid, records


async def test_every_id_resumes_exactly_here_on_another_instance_and_after_a_restart(
    pg_url, base_settings, http, db
):
    first = await InProcessService(base_settings, pg_url).start()
    running = [first, await InProcessService(base_settings, pg_url).start()]
    try:
        wid, records = await make_session(Api(http, first.url), TOPICS, FILLED)
        heads = {t: (recs[-1]["$seq"] if recs else 0) for t, recs in records.items()}

        async def stored_at_heads() -> bool:  # the resumed stream's cursors were flushed
            row = await session_row(db, wid)
            return row is not None and row["cursors"] == heads

        stream = await Api(http, first.url).stream(wid)
        seen = await drain_all(stream, dict.fromkeys(records, 0), records)
        stream.close()
        assert len(seen) == TOPICS + FILLED
        assert all(frame_id.startswith("ck.") and len(frame_id) <= 4096 for frame_id, _ in seen)
        distinct = dict(seen)  # caught-up frames repeat the id of the map they leave unchanged
        assert len(distinct) in (FILLED, FILLED + 1)  # + all zeros if an empty topic went first

        for n, (frame_id, cursors) in enumerate(distinct.items()):
            if n == len(distinct) // 2:  # restart: the first service stops, a new one starts
                await running.pop(0).stop()
                running.append(await InProcessService(base_settings, pg_url).start())
            here = running[n % 2]  # the other instance, then the same / the restarted one
            await wait_for(stored_at_heads, 10, "the session's cursors back at the heads")
            resumed = await Api(http, here.url).stream(wid, last_event_id=frame_id)
            assert await drain_all(resumed, cursors, records)  # exactly from that map
            resumed.close()
    finally:
        for svc in running:
            await svc.stop()


async def test_a_malformed_or_foreign_token_is_400_and_opens_nothing(api, service, http, db):
    wid, records = await make_session(api, 30, 0)
    names = list(records)
    foreign = id_by_hand(dict.fromkeys([n[:-1] + "x" for n in names], 1))
    truncated = id_by_hand(dict.fromkeys(names, 1))[:-8]
    assert foreign.startswith("ck.") and truncated.startswith("ck.")
    for token, message in [
        (truncated, "Last-Event-ID: malformed checkpoint token (expected 30 cursors of 1 bytes)"),
        (foreign, "Last-Event-ID: this checkpoint token belongs to a session over other topics"),
    ]:
        async with http.get(
            f"{service.url}/v0/watch/{wid}", headers={**SSE, "Last-Event-ID": token}
        ) as r:
            assert (r.status, await r.json()) == (
                400,
                {"error": {"code": "invalid_request", "message": message}},
            )
    # The inline id such a session would need is over aiohttp's 8190-byte header field limit:
    # refused by the HTTP parser with the contract's JSON body (no echo of the request), which
    # is why these ids are tokens.
    inline = base64.urlsafe_b64encode(compact(dict.fromkeys(names, 1)).encode()).decode()
    assert len(inline) > 8190
    async with http.get(
        f"{service.url}/v0/watch/{wid}", headers={**SSE, "Last-Event-ID": inline}
    ) as r:
        assert r.status == 400
        assert r.headers["Content-Type"].startswith("application/json")
        body = await r.json()
    assert body["error"]["code"] == "invalid_request"
    assert inline[:64] not in body["error"]["message"]
    assert (await session_row(db, wid))["leased"] is False
