"""The sink counts what it lands: the real service process is killed after the sink landed
every record, restarts, and re-sends from the cursors it had persisted (behind the sink's).
Every re-sent record is recognised, logged and counted; no cursor moves backwards, in memory,
in ``state.json`` or in a segment footer; and the landing holds exactly the re-sent copies.

Each re-sent range is evidence in the footers of the segments that land it, as compact reads
it back (``redelivered``): a plain duplicate (the same copies again) and a source restored
with its sessions (the seqs issued again, other content) give the two different verdicts,
with their exact ranges."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import re
import signal

import psycopg
import pytest

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol.requests import NewRecord
from watch_service.sink.landing import Landing
from watch_service.storage import Storage
from watch_service.store import topics as topic_store

from ..restore import SOURCE_TABLES
from ..support import ServiceProcess, unique, wait_for
from . import harness as lv

pytestmark = pytest.mark.e2e

PER_TOPIC = 500
BATCH = 50
LATER = 10  # records appended after the restart, landed once


async def append(http, url: str, topic: str, values: range) -> None:
    for start in range(values.start, values.stop, BATCH):
        body = {
            "records": [{"data": {"n": n}} for n in range(start, min(start + BATCH, values.stop))]
        }
        async with http.post(f"{url}/v0/topics/{topic}/records", json=body) as r:
            assert r.status == 200, await r.text()


async def persisted_cursors(pg_url: str, wid: str) -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute("SELECT cursors FROM watch_sessions WHERE wid = %s", (wid,))
        (cursors,) = await cur.fetchone()
        return cursors


async def test_redelivery_after_a_service_restart_is_counted_exactly(
    service, http, pg_url, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="auditsync.sink")
    topics = (unique("redo-a"), unique("redo-b"))
    for t in topics:
        async with http.put(f"{service.url}/v0/topics/{t}", json={}) as r:
            assert r.status == 201
        await append(http, service.url, t, range(1, PER_TOPIC + 1))
    # The write-behind cursor flush is an hour away: killed, the process has persisted only
    # the cursors its session started with, so it re-sends everything after them.
    proc = ServiceProcess(
        pg_url, env={"AUDITSYNC_CURSOR_FLUSH_MS": "3600000"}, log_path=tmp_path / "service.log"
    )
    await asyncio.to_thread(proc.start)
    cfg = lv.config(
        tmp_path / "landing",
        proc.url,
        topics=topics,
        flush_rows=120,
        heartbeat_ms=5000,
        watchdog_slack_ms=5000,
        backoff_cap_ms=300,
    )
    heads = dict.fromkeys(topics, PER_TOPIC)
    try:
        async with lv.running(cfg) as run:
            await wait_for(
                lambda: lv.state(cfg).get("cursors") == heads,
                timeout=60,
                what="every record landed",
            )
            assert run.sink.stats.duplicates == 0
            await asyncio.to_thread(proc.stop, signal.SIGKILL)
            wid = lv.state(cfg)["wid"]
            behind = await persisted_cursors(pg_url, wid)
            resent = sum(PER_TOPIC - behind[t] for t in topics)
            assert resent == 2 * PER_TOPIC, behind  # behind by everything: no stream closed

            for t in topics:  # appended elsewhere while the process is down
                await append(http, service.url, t, range(PER_TOPIC + 1, PER_TOPIC + LATER + 1))
            await asyncio.to_thread(proc.start)
            total = 2 * (PER_TOPIC + LATER) + resent
            done = dict.fromkeys(topics, PER_TOPIC + LATER)
            await wait_for(
                lambda: run.sink.stats.records == total and lv.state(cfg).get("cursors") == done,
                timeout=60,
                what="the re-sent and new records landed",
            )
            assert run.sink.stats.duplicates == resent
            assert await run.stop() == 0
    finally:
        await asyncio.to_thread(proc.stop)

    logged = sum(int(n) for n in re.findall(r"re-delivered: (\d+) record", caplog.text))
    assert logged == resent
    rows = [r for r in lv.rows(cfg) if r["kind"] == "record"]
    copies = collections.Counter((r["topic"], r["seq"]) for r in rows)
    assert copies == {
        (t, s): 2 if s <= PER_TOPIC else 1 for t in topics for s in range(1, PER_TOPIC + LATER + 1)
    }

    landing = Landing(cfg.storage(), cfg.consumer)
    footers = [landing.segment_footer(name)["cursors"] for name in lv.segments(cfg)]
    assert len(footers) > 2
    for before, after in itertools.pairwise(footers):
        assert all(after[t] >= before[t] for t in before), (before, after)
    state = lv.state(cfg)
    assert state["cursors"] == done and cursor_codec.decode(state["last_id"]) == done
    assert evidence(cfg) == [
        ("c1", t, behind[t] + 1, PER_TOPIC, "duplicate", PER_TOPIC) for t in sorted(topics)
    ]


def evidence(cfg) -> list[tuple]:
    """The re-delivery ranges compact reads from the landing's segment footers."""
    from spark_jobs.steps.compact.main import listed_names, new_segments, redelivered

    root = Storage(cfg.landing)
    segments = new_segments(listed_names(root, {"consumers": {}}), {"consumers": {}})
    return sorted(
        (r["consumer"], r["topic"], r["seq_from"], r["seq_to"], r["verdict"], r["cursor"])
        for r in redelivered(root, segments)
    )


async def test_a_source_restored_with_its_sessions_reissues_seqs_the_sink_holds(
    restorable, http, tmp_path, caplog
):
    """The source and its sessions go back to a copy taken at seq 100 while the sink, never
    restarted, holds 1..200; 101..250 are written again with other content before the service
    is back, so the session resumes at 100, below the sink's cursor and the new head: 101..200
    come again, reissued, with nothing to say so but the copies themselves."""
    caplog.set_level(logging.INFO, logger="auditsync.sink")
    topic = unique("reissue")
    proc = ServiceProcess(
        restorable.url, env={"AUDITSYNC_CURSOR_FLUSH_MS": "20"}, log_path=tmp_path / "svc.log"
    )
    await asyncio.to_thread(proc.start)
    cfg = lv.config(tmp_path / "landing", proc.url, topics=(topic,), backoff_cap_ms=300)
    try:
        async with http.put(f"{proc.url}/v0/topics/{topic}", json={}) as r:
            assert r.status == 201
        async with lv.running(cfg) as run:
            await append(http, proc.url, topic, range(1, 101))
            await wait_for(lambda: lv.state(cfg).get("cursors") == {topic: 100}, timeout=60,
                           what="1..100 landed")  # fmt: skip
            wid = lv.state(cfg)["wid"]

            async def flushed() -> bool:
                return await persisted_cursors(restorable.url, wid) == {topic: 100}

            await wait_for(flushed, timeout=30, what="the session's cursor stored at 100")
            backup = await restorable.dump(SOURCE_TABLES)
            await append(http, proc.url, topic, range(101, 201))
            await wait_for(lambda: lv.state(cfg).get("cursors") == {topic: 200}, timeout=60,
                           what="101..200 landed")  # fmt: skip
            await asyncio.to_thread(proc.stop)
            await restorable.restore(backup, SOURCE_TABLES)
            assert await persisted_cursors(restorable.url, wid) == {topic: 100}
            async with await psycopg.AsyncConnection.connect(restorable.url, autocommit=True) as db:
                again = [NewRecord(f'{{"n":{n},"v":"b"}}', None, None, None) for n in range(150)]
                done = await topic_store.append(db, topic, again)
                assert done is not None and (done.first_seq, done.last_seq) == (101, 250)
            await asyncio.to_thread(proc.start)
            await wait_for(lambda: lv.state(cfg).get("cursors") == {topic: 250}, timeout=60,
                           what="101..250 landed again")  # fmt: skip
            assert run.sink.stats.duplicates == 100
            assert await run.stop() == 0
    finally:
        await asyncio.to_thread(proc.stop)
    assert evidence(cfg) == [("c1", topic, 101, 200, "reissued", 200)]
    assert f"c1 {topic}: seqs 101..200 re-delivered at or below its cursor 200 (reissued" in (
        caplog.text
    )
