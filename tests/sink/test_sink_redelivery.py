"""The sink counts what it lands: the real service process is killed after the sink landed
every record, restarts, and re-sends from the cursors it had persisted (behind the sink's).
Every re-sent record is recognised, logged and counted; no cursor moves backwards, in memory,
in ``state.json`` or in a segment footer; and the landing holds exactly the re-sent copies."""

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
from watch_service.sink.landing import Landing

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
