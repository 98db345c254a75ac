"""The shared tailers' caches are bounded in bytes, not records: a watcher of 1 MiB records
never makes the service's caches hold more than ``tail_cache_bytes``, every record still
reaches it, and ``/metrics`` shows the bound and the bytes held."""

from __future__ import annotations

import pytest

from tests.support import unique
from tests.watch.conftest import Api
from tests.watch.wire import caught_up_frame, record_frame
from watch_service.web.app_keys import HUB

pytestmark = [pytest.mark.service, pytest.mark.pg]
LIMIT = 8_000_000  # exact under the metrics' %g rendering
RECORDS = 12


async def test_one_mib_records_never_push_the_cache_past_its_bytes(make_service, http):
    svc = await make_service(tail_cache_bytes=LIMIT)
    api, hub = Api(http, svc.url), svc.app[HUB]
    topic = await api.topic(unique("w.big"))
    wid = (await api.watch({"topics": {topic: {}}, "heartbeat_ms": 60000}))["wid"]
    stream = await api.stream(wid)
    assert await stream.frame() == caught_up_frame(topic, 0, {topic: 0})

    payload = "x" * ((1 << 20) - 2)  # with its quotes, the data text is 1 MiB
    for seq in range(1, RECORDS + 1):
        await api.append(topic, payload[:-1] + str(seq % 10))
        records = await api.records(topic, seq - 1)
        assert await stream.frame() == record_frame(topic, records, seq - 1, seq, {topic: seq - 1})
        assert hub.cache_total <= LIMIT
    assert 0 < hub.cache_peak <= LIMIT
    # The bound held with records pushed at the tail: the cache kept only the newest ones.
    tailer = hub.tailers[topic]
    assert tailer.cache_end == RECORDS and 1 <= len(tailer.cache) < RECORDS

    async with http.get(f"{svc.url}/metrics") as r:
        text = await r.text()
    gauges = dict(line.split(" ") for line in text.splitlines() if line.startswith("auditsync_t"))
    assert float(gauges["auditsync_tail_cache_limit_bytes"]) == LIMIT
    assert 0 < float(gauges["auditsync_tail_cache_bytes"]) <= LIMIT
    stream.close()
