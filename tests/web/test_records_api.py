"""The Records API over real sockets: append with consecutive seqs, read pages in order, the
record wire shape, and atomic batches (a batch that fails part-way leaves nothing behind)."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support import call
from watch_service.protocol.requests import NewRecord
from watch_service.store import topics as store

pytestmark = [pytest.mark.service, pytest.mark.pg]

READ_KEYS = {"topic", "records", "from_seq", "to_seq", "head_seq", "earliest_seq"}


@pytest.fixture
async def topic(service, http, topic_name) -> str:
    status, _ = await call(http, "PUT", f"{service.url}/v0/topics/{topic_name}", json={})
    assert status == 201
    return topic_name


async def post(http, service, topic: str, records: list[dict]) -> tuple[int, dict]:
    return await call(
        http, "POST", f"{service.url}/v0/topics/{topic}/records", json={"records": records}
    )


async def read(http, service, topic: str, query: str = "") -> dict:
    status, body = await call(http, "GET", f"{service.url}/v0/topics/{topic}/records{query}")
    assert status == 200, body
    assert set(body) in (READ_KEYS, READ_KEYS | {"tombstone"})
    return body


async def db_state(db, topic: str) -> tuple[int, int, int]:
    cur = await db.execute(
        "SELECT t.head_seq, t.earliest_seq, (SELECT count(*) FROM records r WHERE r.topic = t.name) "  # noqa: E501
        "FROM topics t WHERE t.name = %s",
        (topic,),
    )
    return await cur.fetchone()


async def test_append_returns_consecutive_seqs(service, http, topic):
    before = time.time_ns() // 1_000_000
    status, body = await post(http, service, topic, [{"data": i} for i in range(3)])
    assert status == 200
    assert set(body) == {"topic", "first_seq", "last_seq", "head_seq", "ts"}
    assert (body["topic"], body["first_seq"], body["last_seq"], body["head_seq"]) == (
        topic,
        1,
        3,
        3,
    )
    assert before - 1000 <= body["ts"] <= time.time_ns() // 1_000_000 + 1000
    status, body2 = await post(http, service, topic, [{"data": "x"}])
    assert (body2["first_seq"], body2["last_seq"], body2["head_seq"]) == (4, 4, 4)
    assert body2["ts"] >= body["ts"]


async def test_record_shape_round_trips(service, http, topic):
    records = [
        {"data": {"nested": {"a": [1, 2.5, None, True]}, "ü": "日本"}},
        {"data": None, "meta": {"who": "alice", "n": 1}, "tag": "login", "node": "node-1"},
        {"data": "plain", "tag": "t" * 256, "node": "n" * 128},
        {"data": [], "meta": {}},
        {"data": 0, "meta": None, "tag": None, "node": None},
        {"data": {"nul": "a\u0000b", "quote": '"\\'}},
    ]
    status, appended = await post(http, service, topic, records)
    assert status == 200, appended
    body = await read(http, service, topic)
    ts = appended["ts"]
    assert body["records"] == [
        {"$seq": 1, "$ts": ts, "data": records[0]["data"]},
        {
            "$seq": 2,
            "$ts": ts,
            "$tag": "login",
            "$node": "node-1",
            "meta": {"who": "alice", "n": 1},
            "data": None,
        },
        {"$seq": 3, "$ts": ts, "$tag": "t" * 256, "$node": "n" * 128, "data": "plain"},
        {"$seq": 4, "$ts": ts, "meta": {}, "data": []},
        {"$seq": 5, "$ts": ts, "data": 0},
        {"$seq": 6, "$ts": ts, "data": {"nul": "a\u0000b", "quote": '"\\'}},
    ]
    assert (
        body["topic"],
        body["from_seq"],
        body["to_seq"],
        body["head_seq"],
        body["earliest_seq"],
    ) == (topic, 0, 6, 6, 1)


async def test_the_append_separators_in_tags_and_data_round_trip(service, http, topic):
    """The store sends a batch as one text with fields split by \\x1f and records by \\x1e;
    data and meta hold those only escaped, but a tag may hold them raw: such a batch goes as
    arrays instead, and both ways store exactly what was sent."""
    plain = [{"data": {"s": "a\u001eb\u001fc"}, "meta": {"m": "\u001f"}, "tag": "ok", "node": "n"}]
    odd = [
        {"data": 1, "tag": "a\u001eb"},
        {"data": 2, "tag": "\u001f", "node": "n"},
        {"data": 3, "tag": "tab\there", "meta": {"x": 1}},
        {"data": 4},
    ]
    for batch in (plain, odd):
        status, body = await post(http, service, topic, batch)
        assert status == 200, body
    records = (await read(http, service, topic))["records"]
    assert [
        (r["$seq"], r.get("$tag"), r.get("$node"), r.get("meta"), r["data"]) for r in records
    ] == [
        (1, "ok", "n", {"m": "\u001f"}, {"s": "a\u001eb\u001fc"}),
        (2, "a\u001eb", None, None, 1),
        (3, "\u001f", "n", None, 2),
        (4, "tab\there", None, {"x": 1}, 3),
        (5, None, None, None, 4),
    ]


async def test_paging_with_from_seq_and_limit(service, http, topic):
    await post(http, service, topic, [{"data": i} for i in range(25)])
    seen, cursor = [], 0
    while True:
        body = await read(http, service, topic, f"?from_seq={cursor}&limit=10")
        if not body["records"]:
            assert body["to_seq"] == cursor == 25
            break
        seqs = [r["$seq"] for r in body["records"]]
        assert seqs == list(range(cursor + 1, cursor + 1 + len(seqs)))
        assert body["to_seq"] == seqs[-1]
        seen += [r["data"] for r in body["records"]]
        cursor = body["to_seq"]
    assert seen == list(range(25))
    body = await read(http, service, topic, "?from_seq=1000")
    assert (body["records"], body["from_seq"], body["to_seq"], body["head_seq"]) == (
        [],
        1000,
        1000,
        25,
    )


async def test_default_limit_is_256_and_max_is_10000(service, http, topic):
    for _ in range(11):
        status, _ = await post(http, service, topic, [{"data": i} for i in range(1000)])
        assert status == 200
    assert len((await read(http, service, topic))["records"]) == 256
    body = await read(http, service, topic, "?limit=10000")
    assert [r["$seq"] for r in body["records"]] == list(range(1, 10_001))
    assert (body["to_seq"], body["head_seq"]) == (10_000, 11_000)


async def test_empty_topic_read(service, http, topic):
    body = await read(http, service, topic)
    assert body == {
        "topic": topic,
        "records": [],
        "from_seq": 0,
        "to_seq": 0,
        "head_seq": 0,
        "earliest_seq": 1,
    }


async def test_ts_is_server_time_and_never_decreases(service, http, topic):
    stamps = []
    for _ in range(5):
        _, body = await post(http, service, topic, [{"data": 1}])
        stamps.append(body["ts"])
    assert stamps == sorted(stamps)
    assert abs(stamps[-1] - time.time_ns() // 1_000_000) < 5000


async def test_unknown_topic(service, http, topic_name):
    expected = (
        404,
        {"error": {"code": "topic_not_found", "message": f"topic {topic_name!r} does not exist"}},
    )
    assert await post(http, service, topic_name, [{"data": 1}]) == expected
    assert await call(http, "GET", f"{service.url}/v0/topics/{topic_name}/records") == expected
    # an append to an unknown topic does not create it
    assert await call(http, "GET", f"{service.url}/v0/topics/{topic_name}") == expected


# -- atomic batches ----------------------------------------------------------------------------
async def test_batch_over_record_limit_part_way_leaves_nothing(make_service, http, db, topic_name):
    svc = await make_service(max_record_bytes=100)
    await call(http, "PUT", f"{svc.url}/v0/topics/{topic_name}", json={})
    status, _ = await post(http, svc, topic_name, [{"data": "seed"}])
    assert status == 200
    batch = [{"data": i} for i in range(5)]
    batch[2] = {"data": "x" * 200}
    status, body = await post(http, svc, topic_name, batch)
    assert (status, body) == (
        413,
        {
            "error": {
                "code": "payload_too_large",
                "message": "records[2]: 202 bytes of data+meta is over the per-record limit of 100 bytes",  # noqa: E501
            }
        },
    )
    assert await db_state(db, topic_name) == (1, 1, 1)
    body = await read(http, svc, topic_name)
    assert [r["data"] for r in body["records"]] == ["seed"]
    # the next good batch continues at 2: the refused batch consumed no seqs
    status, body = await post(http, svc, topic_name, [{"data": 1}])
    assert body["first_seq"] == 2


async def test_store_append_failing_mid_batch_leaves_nothing(service, http, db, topic):
    await post(http, service, topic, [{"data": "before"}])
    good = NewRecord(data='{"ok":true}', meta=None, tag=None, node="n")
    bad = NewRecord(data='{"ok":false}', meta=None, tag=None, node="x" * 129)  # violates CHECK
    with pytest.raises(psycopg.errors.CheckViolation):
        await store.append(db, topic, [good, good, bad, good, good])
    assert await db_state(db, topic) == (1, 1, 1)
    body = await read(http, service, topic)
    assert [r["$seq"] for r in body["records"]] == [1]
    result = await store.append(db, topic, [good, good])
    assert (result.first_seq, result.last_seq) == (2, 3)


async def test_store_append_bad_json_mid_batch_leaves_nothing(db, service, http, topic):
    good = NewRecord(data="1", meta=None, tag=None, node=None)
    bad = NewRecord(data="{not json", meta=None, tag=None, node=None)
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        await store.append(db, topic, [good, bad, good])
    assert await db_state(db, topic) == (0, 1, 0)


async def test_capped_append_trims_in_step(service, http, db, topic_name):
    await call(http, "PUT", f"{service.url}/v0/topics/{topic_name}", json={"max_records": 5})
    for i in range(4):
        await post(http, service, topic_name, [{"data": i * 3 + j} for j in range(3)])
        head = (i + 1) * 3
        assert await db_state(db, topic_name) == (head, max(1, head - 4), min(head, 5))
    cur = await db.execute(
        "SELECT gap_from, gap_to, reason FROM gaps WHERE topic = %s", (topic_name,)
    )
    assert await cur.fetchall() == [(1, 7, "cap")]
