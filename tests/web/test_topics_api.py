"""The Topics API over real sockets: create / update / list / get / delete, the topic object,
and delete-then-recreate continuing the numbering (with the `recreated` / `mixed` tombstone)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support import call, unique

pytestmark = [pytest.mark.service, pytest.mark.pg]

TOPIC_KEYS = {"topic", "head_seq", "earliest_seq", "max_records", "ttl_ms", "created_at"}


async def append(http, service, topic: str, n: int) -> dict:
    status, body = await call(
        http,
        "POST",
        f"{service.url}/v0/topics/{topic}/records",
        json={"records": [{"data": i} for i in range(n)]},
    )
    assert status == 200, body
    return body


async def gaps(db, topic: str) -> list[tuple[int, int, str]]:
    cur = await db.execute(
        "SELECT gap_from, gap_to, reason FROM gaps WHERE topic = %s ORDER BY gap_from", (topic,)
    )
    return await cur.fetchall()


async def test_create_returns_201_and_the_topic_object(service, http, topic_name):
    before = dt.datetime.now(dt.UTC)
    status, body = await call(
        http,
        "PUT",
        f"{service.url}/v0/topics/{topic_name}",
        json={"max_records": 100, "ttl_ms": 60_000},
    )
    assert status == 201
    assert set(body) == TOPIC_KEYS
    assert body["topic"] == topic_name
    assert (body["head_seq"], body["earliest_seq"]) == (0, 1)  # empty: earliest = head + 1
    assert (body["max_records"], body["ttl_ms"]) == (100, 60_000)
    assert body["created_at"].endswith("Z")
    created = dt.datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
    assert abs((created - before).total_seconds()) < 5
    assert await call(http, "GET", f"{service.url}/v0/topics/{topic_name}") == (200, body)


async def test_empty_body_and_nulls_mean_unlimited(service, http):
    for kw in ({}, {"data": b""}, {"json": {"max_records": None, "ttl_ms": None}}):
        name = unique()
        status, body = await call(http, "PUT", f"{service.url}/v0/topics/{name}", **kw)
        assert status == 201, body
        assert (body["max_records"], body["ttl_ms"]) == (None, None)


async def test_put_again_updates_with_200(service, http, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    status, first = await call(http, "PUT", url, json={"max_records": 10})
    assert status == 201
    await append(http, service, topic_name, 3)
    status, body = await call(http, "PUT", url, json={"ttl_ms": 5000})
    assert status == 200
    assert body == {**first, "head_seq": 3, "max_records": None, "ttl_ms": 5000}
    status, body = await call(http, "PUT", url, json={})
    assert status == 200
    assert (body["max_records"], body["ttl_ms"], body["head_seq"]) == (None, None, 3)
    assert body["created_at"] == first["created_at"]


async def test_tighter_cap_trims_at_once(service, http, db, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    await call(http, "PUT", url, json={})
    await append(http, service, topic_name, 10)
    status, body = await call(http, "PUT", url, json={"max_records": 3})
    assert status == 200
    assert (body["head_seq"], body["earliest_seq"]) == (10, 8)
    assert await gaps(db, topic_name) == [(1, 7, "cap")]
    _, read = await call(http, "GET", f"{url}/records")
    assert [r["$seq"] for r in read["records"]] == [8, 9, 10]


async def test_list_topics(service, http, topic_name):
    other = topic_name + "-b"
    for name in (topic_name, other):
        await call(http, "PUT", f"{service.url}/v0/topics/{name}", json={"max_records": 5})
    await append(http, service, other, 2)
    status, body = await call(http, "GET", f"{service.url}/v0/topics")
    assert status == 200
    assert list(body) == ["topics"]
    mine = {t["topic"]: t for t in body["topics"] if t["topic"] in (topic_name, other)}
    assert set(mine) == {topic_name, other}
    assert all(set(t) == TOPIC_KEYS for t in body["topics"])
    assert mine[other]["head_seq"] == 2
    names = [t["topic"] for t in body["topics"]]
    assert names == sorted(names)


async def test_get_unknown_topic(service, http, topic_name):
    assert await call(http, "GET", f"{service.url}/v0/topics/{topic_name}") == (
        404,
        {"error": {"code": "topic_not_found", "message": f"topic {topic_name!r} does not exist"}},
    )


async def test_delete(service, http, db, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    await call(http, "PUT", url, json={})
    await append(http, service, topic_name, 4)
    assert await call(http, "DELETE", url) == (200, {"topic": topic_name, "head_seq": 4})
    not_found = (
        404,
        {"error": {"code": "topic_not_found", "message": f"topic {topic_name!r} does not exist"}},
    )
    assert await call(http, "GET", url) == not_found
    assert await call(http, "GET", f"{url}/records") == not_found
    assert await call(http, "POST", f"{url}/records", json={"records": [{"data": 1}]}) == not_found
    assert await call(http, "DELETE", url) == not_found
    _, listed = await call(http, "GET", f"{service.url}/v0/topics")
    assert topic_name not in {t["topic"] for t in listed["topics"]}
    assert await gaps(db, topic_name) == [(1, 4, "deleted")]
    cur = await db.execute("SELECT count(*) FROM records WHERE topic = %s", (topic_name,))
    assert (await cur.fetchone())[0] == 0


async def test_delete_empty_topic_writes_no_gap(service, http, db, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    await call(http, "PUT", url, json={})
    assert await call(http, "DELETE", url) == (200, {"topic": topic_name, "head_seq": 0})
    assert await gaps(db, topic_name) == []
    status, body = await call(http, "PUT", url, json={})
    assert status == 201
    assert (body["head_seq"], body["earliest_seq"]) == (0, 1)


async def test_recreate_continues_numbering_with_recreated_tombstone(service, http, db, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    await call(http, "PUT", url, json={})
    await append(http, service, topic_name, 5)
    await call(http, "DELETE", url)
    status, body = await call(http, "PUT", url, json={"max_records": 50})
    assert status == 201  # recreated counts as created
    assert (body["head_seq"], body["earliest_seq"], body["max_records"]) == (5, 6, 50)
    appended = await append(http, service, topic_name, 2)
    assert (appended["first_seq"], appended["last_seq"]) == (6, 7)

    status, read = await call(http, "GET", f"{url}/records?from_seq=0")
    assert status == 200
    assert read["tombstone"] == {"reason": "recreated", "gap_from": 1, "gap_to": 5}
    assert [r["$seq"] for r in read["records"]] == [6, 7]
    assert (read["earliest_seq"], read["head_seq"], read["to_seq"]) == (6, 7, 7)
    # A cursor from before the delete stays meaningful: it gets exactly what it missed.
    _, read = await call(http, "GET", f"{url}/records?from_seq=3")
    assert read["tombstone"] == {"reason": "recreated", "gap_from": 4, "gap_to": 5}
    _, read = await call(http, "GET", f"{url}/records?from_seq=5")
    assert "tombstone" not in read
    assert [r["$seq"] for r in read["records"]] == [6, 7]
    assert await gaps(db, topic_name) == [(1, 5, "deleted")]


async def test_recreated_range_spanning_a_cap_gap_is_mixed(service, http, db, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    await call(http, "PUT", url, json={"max_records": 3})
    await append(http, service, topic_name, 5)  # cap trims 1..2
    await call(http, "DELETE", url)  # deletes 3..5
    await call(http, "PUT", url, json={})
    await append(http, service, topic_name, 1)  # seq 6
    assert await gaps(db, topic_name) == [(1, 2, "cap"), (3, 5, "deleted")]

    _, read = await call(http, "GET", f"{url}/records?from_seq=0")
    assert read["tombstone"] == {"reason": "mixed", "gap_from": 1, "gap_to": 5}
    assert [r["$seq"] for r in read["records"]] == [6]
    _, read = await call(http, "GET", f"{url}/records?from_seq=1")
    assert read["tombstone"] == {"reason": "mixed", "gap_from": 2, "gap_to": 5}
    _, read = await call(http, "GET", f"{url}/records?from_seq=2")
    assert read["tombstone"] == {"reason": "recreated", "gap_from": 3, "gap_to": 5}


async def test_delete_twice_and_recreate_twice(service, http, db, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    for round_ in range(3):
        status, body = await call(http, "PUT", url, json={})
        assert status == 201
        assert body["head_seq"] == 2 * round_
        res = await append(http, service, topic_name, 2)
        assert res["first_seq"] == 2 * round_ + 1
        await call(http, "DELETE", url)
    # consecutive deletes leave one contiguous "deleted" row
    assert await gaps(db, topic_name) == [(1, 6, "deleted")]
