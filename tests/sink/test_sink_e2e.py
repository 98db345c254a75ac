"""The sink as its own OS process against the real service and PostgreSQL: killed with
SIGKILL mid-stream and restarted, it lands every seq at least once, counts its duplicates,
keeps exactly the newest document per key in the search index, and — with fault injection —
its fault log names exactly what is missing or altered in the landing."""

from __future__ import annotations

import asyncio
import collections
import re
import signal

import orjson
import psycopg
import pytest

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol.landing import payload_hash
from watch_service.sink.landing import Landing
from watch_service.store.search_index import doc_key

from ..support import unique, wait_for
from . import harness as lv

pytestmark = pytest.mark.e2e

PER_TOPIC = 1000
BATCH = 50
FAULTS = ["--fault-drop-fraction", "0.05", "--fault-corrupt", "10", "--fault-seed", "7"]


def record(n: int) -> dict:
    rec = {"data": {"n": n, "text": f"word{n} alpha beta", "nested": {"v": [n, n * 1.5]}}}
    if n % 3 == 0:
        rec["tag"] = f"k{n % 17}"  # many versions per key: the newest must win in the index
    if n % 10 == 0:
        rec["meta"] = {"src": "e2e"}
    return rec


async def write_all(http, url: str, topics: list[str]) -> None:
    for start in range(1, PER_TOPIC + 1, BATCH):
        for topic in topics:
            body = {"records": [record(n) for n in range(start, start + BATCH)]}
            async with http.post(f"{url}/v0/topics/{topic}/records", json=body) as r:
                assert r.status == 200, await r.text()


async def source(pg_url: str, topics: list[str]) -> dict[tuple[str, int], tuple]:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute(
            "SELECT topic, seq, ts, tag, data::text FROM records WHERE topic = ANY(%s)", (topics,)
        )
        return {(t, s): (ts, tag, data) for t, s, ts, tag, data in await cur.fetchall()}


async def index_rows(pg_url: str, topics: list[str]) -> dict[str, tuple]:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute(
            "SELECT doc_key, seq, data FROM search_documents WHERE topic = ANY(%s)", (topics,)
        )
        return {k: (s, d) for k, s, d in await cur.fetchall()}


def newest_per_key(items: dict[tuple[str, int], tuple[str | None, str]]) -> dict[str, tuple]:
    """doc_key -> (seq, data) of the newest (topic, seq) -> (tag, data JSON text)."""
    out: dict[str, tuple] = {}
    for (topic, seq), (tag, data) in sorted(items.items()):
        out[doc_key(topic, tag, seq)] = (seq, orjson.loads(data))
    return out


@pytest.mark.parametrize(
    "faulty, landing_location",
    [
        pytest.param(False, "local", id="faithful-local"),
        pytest.param(True, "local", id="fault-injection-local"),
        pytest.param(True, "s3", id="fault-injection-s3", marks=pytest.mark.s3),
    ],
    indirect=["landing_location"],
)
async def test_sigkill_mid_stream_then_restart_loses_nothing(
    service, http, pg_url, tmp_path, faulty, landing_location
):
    topics = [unique("sink-a"), unique("sink-b")]
    for t in topics:
        async with http.put(f"{service.url}/v0/topics/{t}", json={}) as r:
            assert r.status == 201
    consumer = landing_location.child("e2e")
    args = [
        "--url",
        service.url,
        "--topics",
        ",".join(topics),
        "--consumer",
        "e2e",
        *lv.landing_flags(landing_location),
        "--database-url",
        pg_url,
        "--flush-rows",
        "150",
        "--flush-ms",
        "100",
        "--progress-s",
        "0.5",
        *(FAULTS if faulty else []),
    ]
    sink = lv.SinkProcess(args, tmp_path / "sink.log", lv.landing_env(landing_location))
    sink.start()
    writer = asyncio.create_task(write_all(http, service.url, topics))
    await wait_for(
        lambda: sink.alive() and lv.segments(consumer), timeout=60, what="the first segment"
    )
    assert await sink.end(signal.SIGKILL) == -signal.SIGKILL
    killed_at = lv.state(consumer).get("frame_no", 0)
    await writer

    sink.start()
    heads = dict.fromkeys(topics, PER_TOPIC)
    await wait_for(
        lambda: sink.alive() and lv.state(consumer).get("cursors") == heads,
        timeout=120,
        what="the restarted sink to reach both heads",
    )
    assert await sink.end(signal.SIGTERM) == 0
    log = sink.log.read_text()

    rows = [r for r in lv.rows(consumer) if r["kind"] == "record"]
    landed = collections.Counter((r["topic"], r["seq"]) for r in rows)
    duplicates = sum(landed.values()) - len(landed)
    reported = sum(int(n) for n in re.findall(r"re-delivered: (\d+) record", log))
    assert duplicates == reported
    frame_nos = sorted({r["frame_no"] for r in lv.rows(consumer)})
    assert frame_nos[-1] > killed_at and len(frame_nos) == len(set(frame_nos))

    src = await source(pg_url, topics)
    assert len(src) == 2 * PER_TOPIC
    by_key = {(r["topic"], r["seq"]): r for r in rows}
    dropped = {(t, s) for k, t, s in lv.faults(consumer) if k == "drop"}
    corrupted = {(t, s) for k, t, s in lv.faults(consumer) if k == "corrupt"}
    assert set(landed) <= set(src)
    assert set(src) - set(landed) == dropped  # every seq 1..N landed, except faults
    mismatched = {key for key, r in by_key.items() if r["data_sha256"] != payload_hash(src[key][2])}
    assert mismatched == corrupted
    for r in rows:  # a re-delivered copy meets the same fate as the first
        assert r["data_sha256"] == by_key[(r["topic"], r["seq"])]["data_sha256"]
        assert r["data_sha256"] == payload_hash(r["data"])
    # Each segment names the frame id in force before its first frame: the session's start for
    # the first, then the one the segment before ended at (the restart resumes from it).
    footers = [Landing(landing_location, "e2e").segment_footer(n) for n in lv.segments(consumer)]
    starts = [cursor_codec.decode(f["before_frame_id"]) for f in footers]
    assert starts == [dict.fromkeys(topics, 0)] + [f["cursors"] for f in footers[:-1]]
    if faulty:
        assert dropped and len(corrupted) == 10
        assert len(re.findall(r"WARNING auditsync.sink: FAULT INJECTION ON", log)) == 2  # starts
        progress = [line for line in log.splitlines() if "frames/s=" in line]
        assert all("WARNING" in line and "FAULT INJECTION ON" in line for line in progress)
    else:
        assert not dropped and not corrupted and "FAULT INJECTION" not in log

    expected = newest_per_key({key: (r["tag"], r["data"]) for key, r in by_key.items()})
    assert await index_rows(pg_url, topics) == expected
    if not faulty:
        assert expected == newest_per_key({k: (v[1], v[2]) for k, v in src.items()})
