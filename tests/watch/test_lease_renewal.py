"""Each open stream's lease is renewed on its own clock, a third of ``LEASE_S`` after the last
renewal (with the session marked active), so renewals spread as the streams' openings did;
a stream not due has only its changed cursors written, its lease extended, nothing else."""

from __future__ import annotations

import pytest

from tests.support import wait_for
from watch_service.server import stream_upkeep
from watch_service.server.stream_upkeep import LEASE_S
from watch_service.web.app_keys import STREAMS

from .wire import caught_up_frame

pytestmark = [pytest.mark.service, pytest.mark.pg]


async def marks(db, wid: str) -> tuple[object, object, dict]:
    cur = await db.execute(
        "SELECT last_active_at, stream_lease_until, cursors FROM watch_sessions WHERE wid = %s",
        (wid,),
    )
    row = await cur.fetchone()
    assert row is not None
    return row[0], row[1], row[2]


async def test_a_lease_is_renewed_when_its_own_third_is_up(api, db, service):
    topic = await api.topic()
    wids = [(await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"] for _ in "ab"]
    streams = [await api.stream(wid) for wid in wids]
    for stream in streams:
        assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})
    open_ = service.app[STREAMS]
    await wait_for(lambda: len(open_) == 2, what="both streams open")
    by_wid = {s.wid: s for s in open_}
    due, fresh = by_wid[wids[0]], by_wid[wids[1]]
    await api.append(topic, 1)
    for stream in streams:
        await stream.frame()
    before = {wid: await marks(db, wid) for wid in wids}
    due.renewed_at -= LEASE_S / 3  # its third is up; the other opened just now

    await stream_upkeep.flush(service.app, rows=100)

    after = {wid: await marks(db, wid) for wid in wids}
    assert after[wids[0]][0] > before[wids[0]][0]  # renewed: marked active
    assert after[wids[0]][1] > before[wids[0]][1] and after[wids[0]][2] == {topic: 1}
    # not due: its cursors written (by this round or the flusher's own), not marked active
    assert after[wids[1]][0] == before[wids[1]][0] and after[wids[1]][2] == {topic: 1}
    assert due.renewed_at >= fresh.renewed_at  # renewed now, after the other opened
    for stream in streams:
        stream.close()
