"""Subscription options on the wire: the node filter, include_meta / include_tags /
include_data, ``limit`` and ``max_batch_bytes`` (an oversized record goes out alone), ``tail``,
and ``consistency: "strong"`` (never a record whose commit is not flushed to the WAL)."""

from __future__ import annotations

import itertools
import json

import psycopg
import pytest

from .conftest import Api
from .wire import caught_up_frame, fields, record_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def test_node_filter_hides_own_records_but_moves_the_cursor(api):
    topic = await api.topic()
    await api.append(
        topic,
        {"data": 1, "node": "web-1"},
        {"data": 2, "node": "web-2"},
        {"data": 3},
        {"data": 4, "node": "web-1"},
        {"data": 5, "node": "web-1"},
    )
    recs = await api.records(topic)
    wid = (await api.watch({"topics": {topic: {}}, "node": "web-1", "limit": 2}))["wid"]
    stream = await api.stream(wid)
    # Pages of two: [1 own, 2] -> 2; [3, 4 own] -> 3 with to_seq 4; [5 own] -> no frame.
    assert await stream.frame() == record_frame(topic, [recs[1]], 0, 5, {topic: 0})
    assert await stream.frame() == record_frame(topic, [recs[2]], 2, 5, {topic: 2}, to_seq=4)
    # Nothing for seq 5, yet caught-up's id shows the cursor at 5.
    assert await stream.frame() == caught_up_frame(topic, 5, {topic: 5})

    await api.append(topic, {"data": 6, "node": "web-1"}, {"data": 7, "node": "web-3"})
    live = await api.records(topic, 5)
    assert await stream.frame() == record_frame(topic, [live[1]], 5, 7, {topic: 5})
    stream.close()


async def test_include_meta_tags_data(api):
    topic = await api.topic()
    await api.append(
        topic, {"data": {"k": "v"}, "meta": {"m": 1}, "tag": "tg", "node": "n1"}, {"data": None}
    )
    recs = await api.records(topic)
    for meta, tags, data in itertools.product([True, False], repeat=3):
        wid = (
            await api.watch(
                {
                    "topics": {topic: {}},
                    "include_meta": meta,
                    "include_tags": tags,
                    "include_data": data,
                }
            )
        )["wid"]
        stream = await api.stream(wid)
        # Without data, no meta either, whatever include_meta says (spec, further decisions).
        assert await stream.frame() == record_frame(
            topic, recs, 0, 2, {topic: 0}, meta=meta and data, tags=tags, data=data
        )
        stream.close()
    # The defaults: meta and data, no tags; $node whenever set.
    raw = record_frame(topic, recs, 0, 2, {topic: 0})
    assert b'{"$seq":1,"$ts":' in raw and b',"$node":"n1","meta":{"m":1},"data":{"k":"v"}}' in raw
    assert b"$tag" not in raw


async def test_limit_and_max_batch_bytes_with_an_oversized_record(api):
    topic = await api.topic()
    big = "x" * 5000
    await api.append(topic, "s1", "s2", big, "s3", "s4", "s5", "s6")
    recs = await api.records(topic)
    wid = (await api.watch({"topics": {topic: {}}, "max_batch_bytes": 1000, "limit": 3}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == record_frame(topic, recs[0:2], 0, 7, {topic: 0})
    assert await stream.frame() == record_frame(topic, recs[2:3], 2, 7, {topic: 2})  # alone
    assert await stream.frame() == record_frame(topic, recs[3:6], 3, 7, {topic: 3})  # limit 3
    assert await stream.frame() == record_frame(topic, recs[6:7], 6, 7, {topic: 6})
    assert await stream.frame() == caught_up_frame(topic, 7, {topic: 7})

    # The same split for live records (they come from the shared tailer's cache).
    await api.append(topic, "s8", big, "s9")
    live = await api.records(topic, 7)
    assert await stream.frame() == record_frame(topic, live[0:1], 7, 10, {topic: 7})
    assert await stream.frame() == record_frame(topic, live[1:2], 8, 10, {topic: 8})
    assert await stream.frame() == record_frame(topic, live[2:3], 9, 10, {topic: 9})
    stream.close()


async def test_tail_starts_at_the_head_at_subscribe(api):
    topic = await api.topic()
    await api.append(topic, 1, 2, 3)
    created = await api.watch({"topics": {topic: {"tail": True, "from_seq": 1}}})
    assert created["topics"][topic] == {"from_seq": 3, "head_seq": 3, "earliest_seq": 1}
    stream = await api.stream(created["wid"])
    assert await stream.frame() == caught_up_frame(topic, 3, {topic: 3})
    await api.append(topic, 4)
    assert await stream.frame() == record_frame(
        topic, await api.records(topic, 3), 3, 4, {topic: 3}
    )
    stream.close()


async def collect_seqs(stream, topic: str, last: int) -> list[int]:
    seqs = []
    while not seqs or seqs[-1] < last:
        f = fields(await stream.frame())
        if f.get("event") == "record":
            seqs += [r["$seq"] for r in json.loads(f["data"])["records"]]
    return seqs


async def test_strong_delivers_everything_in_order(api):
    topic = await api.topic()
    await api.append(topic, *range(40))
    wid = (await api.watch({"topics": {topic: {}}, "consistency": "strong", "limit": 7}))["wid"]
    stream = await api.stream(wid)
    for size in (1, 5, 17, 60, 3):
        await api.append(topic, *range(size))
    assert await collect_seqs(stream, topic, 126) == list(range(1, 127))
    stream.close()


def postgres_db(pg_url: str) -> str:
    return pg_url.rsplit("/", 1)[0] + "/postgres"


async def test_strong_waits_for_the_wal_flush_and_eventual_does_not(pg_url, make_service, http):
    """With appends committing ``synchronous_commit=off`` (the service's setting), a record is
    visible before its commit is flushed. Right after each receipt we read the flush LSN; once
    everything is flushed, pg_walinspect gives each commit's end LSN. A strong stream must
    never have received a record whose commit ended past the flush LSN read right after it; an
    eventual one, on this setup, does (the WAL writer flushes async commits every ~200 ms)."""
    svc = await make_service(synchronous_commit="off")
    api = Api(http, svc.url)
    topic = await api.topic()
    stream = {}
    for mode in ("eventual", "strong"):
        wid = (await api.watch({"topics": {topic: {}}, "consistency": mode}))["wid"]
        stream[mode] = await api.stream(wid)
        assert await stream[mode].frame() == caught_up_frame(topic, 0, {topic: 0})

    async with await psycopg.AsyncConnection.connect(postgres_db(pg_url), autocommit=True) as pgc:
        await pgc.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

        async def flush_lsn() -> int:
            cur = await pgc.execute("SELECT pg_current_wal_flush_lsn() - '0/0'")
            return int((await cur.fetchone())[0])

        cur = await pgc.execute("SELECT pg_current_wal_insert_lsn()")
        start = (await cur.fetchone())[0]
        seen = []  # (seq, flush LSN right after eventual got it, right after strong got it)
        for seq in range(1, 6):
            await api.append(topic, seq)
            after = {}
            for mode in ("eventual", "strong"):
                f = fields(await stream[mode].frame())
                assert f["event"] == "record"
                assert [r["$seq"] for r in json.loads(f["data"])["records"]] == [seq]
                after[mode] = await flush_lsn()
            seen.append((seq, after["eventual"], after["strong"]))

        async with pgc.transaction():
            await pgc.execute("SET LOCAL synchronous_commit = on")
            await pgc.execute("SELECT txid_current()")  # its commit flushes all WAL before it
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as db:
            cur = await db.execute("SELECT seq, xmin::text FROM records WHERE topic = %s", (topic,))
            xids = dict(await cur.fetchall())
        cur = await pgc.execute(
            "SELECT xid::text, end_lsn - '0/0' FROM pg_get_wal_records_info(%s, "
            "pg_current_wal_flush_lsn()) WHERE resource_manager = 'Transaction' "
            "AND record_type = 'COMMIT'",
            (start,),
        )
        commit_end = {xid: int(end) for xid, end in await cur.fetchall()}
    ends = {seq: commit_end[xids[seq]] for seq in xids}

    for seq, _, strong_flush in seen:
        assert strong_flush >= ends[seq], (
            f"strong delivered seq {seq} before its commit was flushed"
        )
    early = [seq for seq, eventual_flush, _ in seen if eventual_flush < ends[seq]]
    assert early, "no eventual delivery ran ahead of the WAL flush in 5 tries"
    for s in stream.values():
        s.close()
