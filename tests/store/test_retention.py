"""Retention (invariant L2): cap and ttl trims write gaps rows with exact ranges and reasons,
``earliest_seq`` follows, and a reader below it gets the contract's tombstone. TTL is driven by
an explicit ``now_ms`` where possible; the CLI and the service's loop are checked for real."""

from __future__ import annotations

import time

import pytest

from tests.support import call, run_cli, wait_for
from watch_service.protocol.tombstones import Tombstone
from watch_service.store import retention

pytestmark = [pytest.mark.service, pytest.mark.pg]

TTL = 60_000


class Topic:
    def __init__(self, service, http, db, name: str) -> None:
        self.service, self.http, self.db, self.name = service, http, db, name
        self.url = f"{service.url}/v0/topics/{name}"

    async def create(self, **config) -> Topic:
        status, body = await call(self.http, "PUT", self.url, json=config)
        assert status == 201, body
        return self

    async def append(self, n: int) -> dict:
        status, body = await call(
            self.http,
            "POST",
            f"{self.url}/records",
            json={"records": [{"data": i} for i in range(n)]},
        )
        assert status == 200, body
        return body

    async def append_later(self, n: int, after_ts: int) -> dict:
        """Append once the server clock has passed ``after_ts``, so the batch is strictly newer."""
        await wait_for(lambda: time.time_ns() // 1_000_000 > after_ts + 1, what="the clock to move")
        body = await self.append(n)
        assert body["ts"] > after_ts
        return body

    async def gaps(self) -> list[tuple[int, int, str]]:
        cur = await self.db.execute(
            "SELECT gap_from, gap_to, reason FROM gaps WHERE topic = %s ORDER BY gap_from",
            (self.name,),
        )
        return await cur.fetchall()

    async def bounds(self) -> tuple[int, int]:
        status, body = await call(self.http, "GET", self.url)
        assert status == 200
        return body["earliest_seq"], body["head_seq"]

    async def read(self, from_seq: int) -> dict:
        status, body = await call(self.http, "GET", f"{self.url}/records?from_seq={from_seq}")
        assert status == 200, body
        return body


@pytest.fixture
async def topic(service, http, db, topic_name) -> Topic:
    return Topic(service, http, db, topic_name)


async def test_cap_trims_with_exact_gaps_and_tombstones(topic):
    await topic.create(max_records=5)
    await topic.append(4)
    assert await topic.gaps() == []
    await topic.append(4)  # head 8 → keep 4..8
    assert await topic.gaps() == [(1, 3, "cap")]
    assert await topic.bounds() == (4, 8)
    await topic.append(4)  # head 12 → keep 8..12
    assert await topic.gaps() == [(1, 7, "cap")]  # contiguous cap rows merge
    assert await topic.bounds() == (8, 12)

    body = await topic.read(0)
    assert body["tombstone"] == {"reason": "cap", "gap_from": 1, "gap_to": 7}
    assert [r["$seq"] for r in body["records"]] == [8, 9, 10, 11, 12]
    assert (body["earliest_seq"], body["head_seq"], body["to_seq"]) == (8, 12, 12)
    assert (await topic.read(5))["tombstone"] == {"reason": "cap", "gap_from": 6, "gap_to": 7}
    assert (await topic.read(6))["tombstone"] == {"reason": "cap", "gap_from": 7, "gap_to": 7}
    for cursor in (7, 9, 12):
        body = await topic.read(cursor)
        assert "tombstone" not in body
        assert [r["$seq"] for r in body["records"]] == list(range(cursor + 1, 13))


async def test_one_batch_larger_than_the_cap(topic):
    await topic.create(max_records=3)
    await topic.append(10)
    assert await topic.gaps() == [(1, 7, "cap")]
    assert await topic.bounds() == (8, 10)


async def test_ttl_trim_with_explicit_now(topic, db):
    await topic.create(ttl_ms=TTL)
    a = await topic.append(3)  # seqs 1..3 at ts_a
    b = await topic.append_later(2, a["ts"])  # seqs 4..5, strictly later
    assert await retention.trim(db, topic.name, now_ms=a["ts"] + TTL) == []  # nothing expired yet
    assert await topic.gaps() == []

    assert await retention.trim(db, topic.name, now_ms=a["ts"] + TTL + 1) == [
        Tombstone("ttl", 1, 3)
    ]
    assert await topic.gaps() == [(1, 3, "ttl")]
    assert await topic.bounds() == (4, 5)
    body = await topic.read(0)
    assert body["tombstone"] == {"reason": "ttl", "gap_from": 1, "gap_to": 3}
    assert [r["$seq"] for r in body["records"]] == [4, 5]

    assert await retention.trim(db, topic.name, now_ms=b["ts"] + TTL + 1) == [
        Tombstone("ttl", 4, 5)
    ]
    assert await topic.gaps() == [(1, 5, "ttl")]
    assert await topic.bounds() == (6, 5)  # empty: earliest = head + 1
    body = await topic.read(2)
    assert body["tombstone"] == {"reason": "ttl", "gap_from": 3, "gap_to": 5}
    assert (body["records"], body["to_seq"]) == ([], 5)
    assert await retention.trim(db, topic.name, now_ms=b["ts"] + 10 * TTL) == []  # idempotent

    c = await topic.append(1)  # numbering continues
    assert c["first_seq"] == 6
    assert "tombstone" not in await topic.read(5)


async def test_ttl_then_cap_is_mixed(topic, db):
    await topic.create(max_records=5, ttl_ms=TTL)
    a = await topic.append(3)  # 1..3 at ts_a
    await topic.append_later(3, a["ts"])  # 4..6: cap trims 1
    assert await topic.gaps() == [(1, 1, "cap")]
    assert await retention.trim(db, topic.name, now_ms=a["ts"] + TTL + 1) == [
        Tombstone("ttl", 2, 3)
    ]
    assert await topic.gaps() == [(1, 1, "cap"), (2, 3, "ttl")]
    assert await topic.bounds() == (4, 6)
    body = await topic.read(0)
    assert body["tombstone"] == {"reason": "mixed", "gap_from": 1, "gap_to": 3}
    assert [r["$seq"] for r in body["records"]] == [4, 5, 6]
    assert (await topic.read(1))["tombstone"] == {"reason": "ttl", "gap_from": 2, "gap_to": 3}


async def test_ttl_and_cap_in_one_trim(topic, db):
    await topic.create(ttl_ms=TTL)
    a = await topic.append(3)  # 1..3 at ts_a (expire first)
    await topic.append_later(5, a["ts"])  # 4..8
    # tighten the cap without trimming yet: one trim pass then removes by both rules
    await db.execute("UPDATE topics SET max_records = 2 WHERE name = %s", (topic.name,))
    assert await retention.trim(db, topic.name, now_ms=a["ts"] + TTL + 1) == [
        Tombstone("ttl", 1, 3),
        Tombstone("cap", 4, 6),
    ]
    assert await topic.gaps() == [(1, 3, "ttl"), (4, 6, "cap")]
    assert await topic.bounds() == (7, 8)
    assert (await topic.read(0))["tombstone"] == {"reason": "mixed", "gap_from": 1, "gap_to": 6}
    assert (await topic.read(3))["tombstone"] == {"reason": "cap", "gap_from": 4, "gap_to": 6}


@pytest.mark.e2e
async def test_retention_run_cli(topic, pg_url):
    await topic.create(ttl_ms=1)
    a = await topic.append(3)
    await wait_for(lambda: time.time_ns() // 1_000_000 > a["ts"] + 1, what="the records to expire")
    code, out, err = await run_cli("retention", "run", env={"DATABASE_URL": pg_url})
    assert code == 0, err
    lines = out.splitlines()
    assert f"{topic.name}: trimmed [1, 3] (ttl)" in lines
    assert lines[-1].startswith("retention: ") and lines[-1].endswith(" gap(s) written")
    assert await topic.gaps() == [(1, 3, "ttl")]
    assert await topic.bounds() == (4, 3)


async def test_service_retention_loop(make_service, http, db, topic_name):
    svc = await make_service(retention_interval_s=0.05)
    topic = Topic(svc, http, db, topic_name)
    await topic.create(ttl_ms=1)
    await topic.append(2)

    async def trimmed() -> bool:
        return await topic.gaps() == [(1, 2, "ttl")]

    await wait_for(trimmed, timeout=10, what="the retention loop to trim")
    assert await topic.bounds() == (3, 2)
    assert (await topic.read(0))["tombstone"] == {"reason": "ttl", "gap_from": 1, "gap_to": 2}
    async with http.get(f"{svc.url}/metrics") as r:
        metrics = await r.text()
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith('auditsync_retention_gaps_total{reason="ttl"}')
    ]
    assert counted and float(counted[0].split()[-1]) >= 1
