"""Invariant L1 under load, over real sockets: concurrent writers to one topic end with exactly
seqs 1..N, and a reader tailing the topic meanwhile never sees seq n before n-1."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.service, pytest.mark.pg]

WRITERS = 8
PER_WRITER = 1000


async def tail(http, url: str, total: int, writers_done: asyncio.Event) -> tuple[list[dict], int]:
    """Read from the cursor until ``total`` records were seen, asserting contiguity each read."""
    seen: list[dict] = []
    cursor, reads_with_records = 0, 0
    while cursor < total:
        done_before_read = writers_done.is_set()
        async with http.get(f"{url}/records", params={"from_seq": cursor, "limit": 10000}) as r:
            assert r.status == 200
            body = await r.json()
        assert "tombstone" not in body
        seqs = [rec["$seq"] for rec in body["records"]]
        assert seqs == list(range(cursor + 1, cursor + 1 + len(seqs))), (
            f"after cursor {cursor} the reader saw {seqs[:5]}…: a seq before its predecessor"
        )
        assert body["head_seq"] >= cursor + len(seqs)
        if seqs:
            reads_with_records += 1
            cursor = seqs[-1]
            assert body["to_seq"] == cursor
            seen += body["records"]
        elif done_before_read:
            raise AssertionError(f"all writers finished but the reader is stuck at {cursor}")
        else:
            await asyncio.sleep(0)  # yield to the writers before polling again
    return seen, reads_with_records


async def write(http, url: str, writer: int, count: int, batch: int = 1) -> list[int]:
    firsts = []
    for i in range(0, count, batch):
        records = [{"data": {"w": writer, "i": i + j}, "node": f"w{writer}"} for j in range(batch)]
        async with http.post(f"{url}/records", json={"records": records}) as r:
            assert r.status == 200, await r.text()
            body = await r.json()
        assert body["last_seq"] - body["first_seq"] == batch - 1
        firsts.append(body["first_seq"])
    return firsts


async def run(http, url: str, batch: int) -> None:
    total = WRITERS * PER_WRITER
    done = asyncio.Event()
    reader = asyncio.create_task(tail(http, url, total, done))
    firsts = await asyncio.gather(*(write(http, url, w, PER_WRITER, batch) for w in range(WRITERS)))
    done.set()
    seen, reads_with_records = await asyncio.wait_for(reader, 60)

    # every append got its own seqs, and together they are exactly 1..total
    all_seqs = sorted(f + j for fs in firsts for f in fs for j in range(batch))
    assert all_seqs == list(range(1, total + 1))
    assert [r["$seq"] for r in seen] == list(range(1, total + 1))
    # each writer's records appear in the order it wrote them
    for w in range(WRITERS):
        mine = [r["data"]["i"] for r in seen if r["data"]["w"] == w]
        assert mine == list(range(PER_WRITER))
        assert {r["$node"] for r in seen if r["data"]["w"] == w} == {f"w{w}"}
    ts = [r["$ts"] for r in seen]
    assert ts == sorted(ts)  # $ts never goes backwards along the log
    assert reads_with_records > 1, "the reader should have tailed while the writers wrote"
    async with http.get(url) as r:
        topic = await r.json()
    assert (topic["head_seq"], topic["earliest_seq"]) == (total, 1)


async def test_concurrent_single_record_appends_with_a_tailing_reader(service, http, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    async with http.put(url, json={}) as r:
        assert r.status == 201
    await run(http, url, batch=1)


async def test_concurrent_batches_with_a_tailing_reader(service, http, topic_name):
    url = f"{service.url}/v0/topics/{topic_name}"
    async with http.put(url, json={}) as r:
        assert r.status == 201
    await run(http, url, batch=50)
