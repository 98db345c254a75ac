"""The sink against a scripted peer: framing, resume headers, retry:, the watchdog, 404 and
error frames, wid reuse across restarts, and refusal."""

import re

import psycopg
import pytest

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol import frames
from watch_service.sink.landing import SCHEMA
from watch_service.store.search_index import SearchIndex

from ..support import free_port, unique, wait_for
from . import harness as lv
from .stub import HANG, StubWatch, event_frame, record_frame

pytestmark = pytest.mark.service


@pytest.fixture
async def stub():
    server = await StubWatch().start()
    yield server
    await server.stop()


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def test_frames_in_odd_chunks_land_and_persist_the_cursor(stub, tmp_path):
    wire = (
        frames.retry(20)
        + record_frame("a", [1, 2], {"a": 2, "b": 0}, head=5, tags={2: "k"})
        + event_frame(
            "tombstone",
            {
                "topic": "b",
                "reason": "cap",
                "gap_from": 1,
                "gap_to": 3,
                "earliest_seq": 4,
                "head_seq": 9,
            },
            {"a": 2, "b": 3},
        )
        + frames.HEARTBEAT
        + event_frame("caught-up", {"topic": "a", "head_seq": 2}, {"a": 2, "b": 3})
        + event_frame(
            "topic-deleted", {"topic": "b", "head_seq": 9, "reason": "deleted"}, {"a": 2, "b": 9}
        )
    )
    stub.scripts.append([*chunks(wire.replace(b"\n", b"\r\n"), 7), HANG])
    cfg = lv.config(tmp_path, stub.url, key="s3cret", node="n1")
    async with lv.running(cfg) as run:
        await wait_for(lambda: lv.state(cfg).get("frame_no") == 4, what="4 frames")
        assert await run.stop() == 0
    assert stub.posts == [
        {
            "topics": {"a": {"from_seq": 0}, "b": {"from_seq": 0}},
            "heartbeat_ms": 1000,
            "include_tags": True,
            "include_meta": True,
            "include_data": True,
            "node": "n1",
        }
    ]
    (get,) = stub.gets
    assert (get.wid, get.authorization) == ("wid_1", "Bearer s3cret")
    assert get.last_event_id == cursor_codec.encode({"a": 0, "b": 0})
    rows = lv.rows(cfg)
    cols = ("frame_no", "kind", "topic", "seq", "cursor", "tag")
    assert [tuple(r[c] for c in cols) for r in rows] == [
        (1, "record", "a", 1, 2, None),
        (1, "record", "a", 2, 2, "k"),
        (2, "tombstone", "b", None, 3, None),
        (3, "caught-up", "a", None, 2, None),
        (4, "topic-deleted", "b", None, 9, None),
    ]
    assert {r["consumer"] for r in rows} == {"c1"} and {r["filter_node"] for r in rows} == {"n1"}
    assert rows[0]["data"] == '{"n":1,"topic":"a"}' and rows[0]["head_seq"] == 5
    for seg in lv.segments(cfg):
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}/\d{2}/part-\d{12}-\d{12}\.parquet", seg)
        assert lv.consumer(cfg).parquet_schema(seg).remove_metadata() == SCHEMA
    st = lv.state(cfg)
    assert st["wid"] == "wid_1" and st["cursors"] == {"a": 2, "b": 9}
    assert st["last_id"] == cursor_codec.encode({"a": 2, "b": 9})


async def test_reconnects_with_last_event_id_after_retry(stub, tmp_path):
    first = record_frame("a", [1], {"a": 1, "b": 0})
    stub.scripts += [[frames.retry(10), first], [record_frame("a", [2], {"a": 2, "b": 0}), HANG]]
    cfg = lv.config(tmp_path, stub.url)
    async with lv.running(cfg) as run:
        await wait_for(lambda: lv.state(cfg).get("frame_no") == 2, what="2 frames")
        assert run.sink.stats.reconnects == 1 and run.sink.stats.duplicates == 0
    assert len(stub.posts) == 1 and [g.wid for g in stub.gets] == ["wid_1", "wid_1"]
    assert stub.gets[1].last_event_id == cursor_codec.encode({"a": 1, "b": 0})
    # retry: 10 with the lowest jitter is 5 ms; the 2000 ms default would be at least 1 s.
    assert stub.gets[1].at - stub.gets[0].at < 0.9
    assert [r["seq"] for r in lv.rows(cfg)] == [1, 2]


async def test_heartbeats_keep_the_stream_and_silence_trips_the_watchdog(stub, tmp_path):
    # heartbeat 1000 ms + slack 200 ms: the watchdog is 2.2 s. Heartbeats every 0.5 s for 3 s
    # keep the connection; the silence after them drops it.
    beats = [step for _ in range(6) for step in (0.5, frames.HEARTBEAT)]
    stub.scripts += [
        [record_frame("a", [1], {"a": 1, "b": 0}), *beats, HANG],
        [record_frame("a", [2], {"a": 2, "b": 0}), HANG],
    ]
    cfg = lv.config(tmp_path, stub.url)
    async with lv.running(cfg) as run:
        await wait_for(lambda: len(stub.gets) == 2, timeout=15, what="a reconnect")
        assert stub.gets[1].at - stub.gets[0].at > 3.0  # not 2.2 s: the heartbeats re-armed it
        assert stub.gets[1].last_event_id == cursor_codec.encode({"a": 1, "b": 0})
        await wait_for(lambda: lv.state(cfg).get("frame_no") == 2, what="frame 2")
        assert run.sink.stats.reconnects == 1


async def test_gone_session_is_reposted_from_the_persisted_cursors(stub, tmp_path):
    stub.scripts += [
        [
            record_frame("a", [1, 2, 3, 4, 5], {"a": 5, "b": 0}),
            event_frame(
                "tombstone",
                {
                    "topic": "b",
                    "reason": "ttl",
                    "gap_from": 1,
                    "gap_to": 3,
                    "earliest_seq": 4,
                    "head_seq": 4,
                },
                {"a": 5, "b": 3},
            ),
        ],
        404,
        [
            event_frame("caught-up", {"topic": "a", "head_seq": 5}, {"a": 5, "b": 3}),
            frames.error_frame("not_found", "session was reclaimed"),
        ],
        [HANG],
    ]
    cfg = lv.config(tmp_path, stub.url)
    async with lv.running(cfg):
        await wait_for(lambda: len(stub.gets) == 4, what="the stream after two re-POSTs")
    assert [g.wid for g in stub.gets] == ["wid_1", "wid_1", "wid_2", "wid_3"]
    assert stub.posts[1]["topics"] == {"a": {"from_seq": 5}, "b": {"from_seq": 3}}
    assert stub.posts[2]["topics"] == {"a": {"from_seq": 5}, "b": {"from_seq": 3}}
    resume = cursor_codec.encode({"a": 5, "b": 3})
    assert [g.last_event_id for g in stub.gets[1:]] == [resume] * 3
    assert lv.state(cfg)["wid"] == "wid_3"
    assert [r["kind"] for r in lv.rows(cfg)] == ["record"] * 5 + [
        "tombstone",
        "caught-up",
    ]


async def test_restart_reuses_the_wid_and_counts_redelivered_records(stub, tmp_path):
    batch = record_frame("a", [1, 2, 3], {"a": 3, "b": 0})
    stub.scripts.append([batch, HANG])
    cfg = lv.config(tmp_path, stub.url)
    async with lv.running(cfg):
        await wait_for(lambda: lv.state(cfg).get("frame_no") == 1, what="frame 1")
    # The peer ignores the rewind and re-sends the batch (at-least-once), then moves on.
    stub.scripts.append([batch, record_frame("a", [4], {"a": 4, "b": 0}), HANG])
    async with lv.running(cfg) as run:
        await wait_for(lambda: lv.state(cfg).get("frame_no") == 3, what="frame 3")
        assert run.sink.stats.duplicates == 3
    assert len(stub.posts) == 1 and [g.wid for g in stub.gets] == ["wid_1", "wid_1"]
    assert stub.gets[1].last_event_id == cursor_codec.encode({"a": 3, "b": 0})
    rows = lv.rows(cfg)
    assert [(r["frame_no"], r["seq"]) for r in rows] == [
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 1),
        (2, 2),
        (2, 3),
        (3, 4),
    ]


async def test_a_refused_key_stops_the_sink(stub, tmp_path):
    stub.scripts.append(401)
    async with lv.running(lv.config(tmp_path, stub.url)) as run:
        assert await run.task == 1


@pytest.mark.pg
async def test_index_outage_never_blocks_landing_and_is_caught_up_later(stub, tmp_path, pg_url):
    topic = unique("idx")
    cursors = {topic: 0}
    script = []
    for start in range(1, 31, 10):
        cursors = {topic: start + 9}
        script.append(
            record_frame(
                topic,
                list(range(start, start + 10)),
                cursors,
                tags={s: f"k{s % 4}" for s in range(start, start + 10)},
            )
        )
    stub.scripts.append([*script, HANG])
    cfg = lv.config(tmp_path, stub.url, topics=(topic,))
    down = SearchIndex(f"postgresql://postgres@127.0.0.1:{free_port()}/x", connect_timeout_s=1)
    async with lv.running(cfg, down) as run:
        await wait_for(lambda: lv.state(cfg).get("frame_no") == 3, what="landing")
        await wait_for(lambda: run.sink.stats.index_errors > 0, what="an index error")
    assert lv.state(cfg)["indexed_frame_no"] == 0
    expected = {f"{topic}/k{k}": max(s for s in range(1, 31) if s % 4 == k) for k in range(4)}

    async def indexed() -> dict:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            cur = await conn.execute(
                "SELECT doc_key, seq FROM search_documents WHERE topic = %s", (topic,)
            )
            return dict(await cur.fetchall())

    async def caught_up() -> bool:
        return await indexed() == expected

    stub.scripts.append([HANG])
    async with lv.running(cfg, SearchIndex(pg_url)):
        await wait_for(caught_up, timeout=20, what="the index to catch up from the landing")
    assert lv.state(cfg)["indexed_frame_no"] == 3
