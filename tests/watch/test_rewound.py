"""A source that goes back: the database restored from a backup taken at seq 200 after the
stream had served 300. Whatever cursor the consumer presents above the head (its
``Last-Event-ID``, a checkpoint token, the session's own cursor, the POST's ``from_seq``), the
stream says so first, in a ``rewound`` frame naming the exact range, and moves the cursor back
to the head; the seqs written again then arrive as ordinary records, new content and all."""

from __future__ import annotations

import psycopg
import pytest

from tests.restore import LOG_TABLES
from tests.support import wait_for
from watch_service.web.app_keys import HUB

from .conftest import Api, stream_closed_with
from .wire import caught_up_frame, checkpoint_id, cursor_id, record_frame, rewound_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]


def batch(first: int, last: int, content: str) -> list[dict]:
    return [{"data": {"n": n, "content": content}} for n in range(first, last + 1)]


async def test_a_rewound_source_is_said_first_then_the_rewritten_seqs_arrive(
    restorable, restore_service, http
):
    api = Api(http, restore_service.url)
    topic = await api.topic()
    await api.append(topic, *batch(1, 200, "kept"))
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    async with await psycopg.AsyncConnection.connect(restorable.url, autocommit=True) as db:
        stream = await api.stream(wid)
        kept = await api.records(topic)
        assert await stream.frame() == record_frame(topic, kept, 0, 200, {topic: 0})
        assert await stream.frame() == caught_up_frame(topic, 200, {topic: 200})
        stream.close()
        await wait_for(stream_closed_with(db, wid, {topic: 200}), what="cursor 200 stored")
        backup = await restorable.dump()

        await api.append(topic, *batch(201, 300, "lost"))
        stream = await api.stream(wid)
        lost = await api.records(topic, 200)
        assert await stream.frame() == record_frame(topic, lost, 200, 300, {topic: 200})
        assert await stream.frame() == caught_up_frame(topic, 300, {topic: 300})
        served = stream.last_id
        assert served == cursor_id({topic: 300})
        stream.close()
        await wait_for(stream_closed_with(db, wid, {topic: 300}), what="cursor 300 stored")

        # The restore: head 200, and the session row as old as the head.
        await restorable.restore(backup)
        assert (await api._call("GET", f"/v0/topics/{topic}"))["head_seq"] == 200
        stream = await api.stream(wid, last_event_id=served)
        assert await stream.frame() == (
            b"id: " + cursor_id({topic: 200}).encode() + b"\nevent: rewound\ndata: "
            b'{"topic":"' + topic.encode() + b'","reason":"source_rewound",'
            b'"gap_from":201,"gap_to":300,"head_seq":200}\n\n'
        )
        assert await stream.frame() == caught_up_frame(topic, 200, {topic: 200})
        await api.append(topic, *batch(201, 300, "rewritten"))
        rewritten = await api.records(topic, 200)
        assert [r["$seq"] for r in rewritten] == list(range(201, 301))
        assert {r["data"]["content"] for r in rewritten} == {"rewritten"}
        assert await stream.frame() == record_frame(topic, rewritten, 200, 300, {topic: 200})
        stream.close()
        await wait_for(stream_closed_with(db, wid, {topic: 300}), what="cursor 300 stored")

        # A restore of the log alone: the session's own cursor (300) is above the head.
        await restorable.restore(backup, LOG_TABLES)
        stream = await api.stream(wid)
        assert await stream.frame() == rewound_frame(topic, 201, 300, 200, {topic: 200})
        assert await stream.frame() == caught_up_frame(topic, 200, {topic: 200})
        stream.close()
        await wait_for(stream_closed_with(db, wid, {topic: 200}), what="cursor 200 stored")

        # A checkpoint token above the head says the same; one at or below it does not.
        stream = await api.stream(wid, last_event_id=checkpoint_id({topic: 280}))
        assert await stream.frame() == rewound_frame(topic, 201, 280, 200, {topic: 200})
        assert await stream.frame() == caught_up_frame(topic, 200, {topic: 200})
        stream.close()
        await wait_for(stream_closed_with(db, wid, {topic: 200}), what="cursor 200 stored")
        stream = await api.stream(wid, last_event_id=checkpoint_id({topic: 190}))
        assert await stream.frame() == record_frame(topic, kept[190:], 190, 200, {topic: 190})
        assert await stream.frame() == caught_up_frame(topic, 200, {topic: 200})
        stream.close()


async def test_a_stream_open_across_the_restore_is_told_before_the_rewritten_seqs(
    restorable, restore_service, http
):
    """The stream stays connected while the source goes back under it. The tailer notices (the
    first write after the restore names seqs its cache holds with another ``$ts``, or the
    safety poll reads a lower head), compares its cache with PostgreSQL, and the stream says
    ``rewound`` before the new records."""
    api = Api(http, restore_service.url)
    topic = await api.topic()
    await api.append(topic, *batch(1, 200, "kept"))
    body = {"topics": {topic: {}}, "heartbeat_ms": 60000, "limit": 1000}
    stream = await api.stream((await api.watch(body))["wid"])
    kept = await api.records(topic)
    assert await stream.frame() == record_frame(topic, kept, 0, 200, {topic: 0})
    assert await stream.frame() == caught_up_frame(topic, 200, {topic: 200})
    backup = await restorable.dump()
    await api.append(topic, *batch(201, 300, "lost"))
    lost = await api.records(topic, 200)
    assert await stream.frame() == record_frame(topic, lost, 200, 300, {topic: 200})

    await restorable.restore(backup)
    await api.append(topic, *batch(201, 260, "rewritten"))
    rewritten = await api.records(topic, 200)
    assert {r["data"]["content"] for r in rewritten} == {"rewritten"}
    said, written = (
        rewound_frame(topic, 201, 300, 200, {topic: 200}),
        record_frame(topic, rewritten, 200, 260, {topic: 200}),
    )
    # Which notices first decides where caught-up falls: the write naming seqs the tailer
    # holds with another $ts (the rewritten seqs, then caught-up at their head), or the
    # safety poll reading a lower head while the topic was quiet (caught-up at 200, then the
    # rewritten seqs pushed live).
    assert await stream.frames(3) in (
        [said, written, caught_up_frame(topic, 260, {topic: 260})],
        [said, caught_up_frame(topic, 200, {topic: 200}), written],
    )
    stream.close()


async def test_a_lost_listen_connection_over_an_unchanged_source_says_nothing(
    restorable, restore_service, http
):
    """Losing the LISTEN connection makes the tailer compare its cache (records it took from
    appends as they were sent: tags, nodes, meta, exact numbers, non-ASCII) with PostgreSQL.
    Nothing went back, so nothing is said: the next frame is the next record."""
    api = Api(http, restore_service.url)
    topic = await api.topic()
    body = {"topics": {topic: {}}, "heartbeat_ms": 60000, "include_tags": True}
    stream = await api.stream((await api.watch(body))["wid"])
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    sent = [
        {"data": {"n": 18446744073709551616, "x": 1.10, "s": "ünï\u2028"}, "meta": {"m": [1]}},
        {"data": [None, True, "a\\b"], "tag": "t-1", "node": "n-1"},
    ]
    await api.append(topic, *sent)
    first = await api.records(topic)
    assert await stream.frame() == record_frame(topic, first, 0, 2, {topic: 0}, tags=True)

    tailer = restore_service.app[HUB].tailers[topic]
    reads = tailer.reads
    async with await psycopg.AsyncConnection.connect(restorable.url, autocommit=True) as db:
        listening = (
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = 'LISTEN auditsync'"
        )
        old = {pid for (pid,) in await (await db.execute(listening)).fetchall()}
        assert old  # this service's, at least (others on this database are cut off too)
        await db.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (list(old),)
        )

        async def listening_again() -> bool:
            pids = {pid for (pid,) in await (await db.execute(listening)).fetchall()}
            return bool(pids - old)

        await wait_for(listening_again, what="the service listening again")
    await wait_for(lambda: tailer.reads > reads, what="the tailer's cache checked")
    await api.append(topic, {"data": 3})
    assert await stream.frame() == record_frame(
        topic, await api.records(topic, 2), 2, 3, {topic: 2}, tags=True
    )
    stream.close()
