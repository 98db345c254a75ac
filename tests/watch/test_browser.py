"""A real browser: headless Chromium's own ``EventSource`` on a page served at the service's
origin, authenticated with ``?token=``, survives a service restart on the same port through its
automatic reconnect with ``Last-Event-ID``, and ends with every seq exactly once, in order."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.browser import artifact
from tests.support import ServiceProcess, unique

from .conftest import READER_PREFIX, SECRETS, Api, bearer
from .relay import CuttableRelay
from .wire import cursor_id

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>auditsync watch</title>
<style>body{font:14px monospace;margin:1em} .seq{display:inline-block;padding:2px 6px;margin:2px;
background:#d4f4dd;border-radius:3px} .ev{color:#555}</style></head>
<body><h3>EventSource on <span id="url"></span></h3><div id="seqs"></div><pre id="log"></pre>
<script>
const url = "/v0/watch/%(wid)s?token=%(token)s";
const state = {seqs: [], events: []};
window.state = state;
document.getElementById("url").textContent = url.replace(/token=[^&]+/, "token=…");
const es = new EventSource(url);
function log(entry) {
  state.events.push(entry);
  document.getElementById("log").textContent += JSON.stringify(entry) + "\\n";
}
es.onopen = () => log(["open"]);
es.addEventListener("record", (e) => {
  const d = JSON.parse(e.data);
  for (const r of d.records) {
    state.seqs.push(r.$seq);
    const s = document.createElement("span");
    s.className = "seq"; s.textContent = r.$seq;
    document.getElementById("seqs").appendChild(s);
  }
  log(["record", e.lastEventId, d.records.map((r) => r.$seq)]);
});
es.addEventListener("caught-up", (e) => log(["caught-up", e.lastEventId, JSON.parse(e.data)]));
// Both the protocol's "event: error" frame (a MessageEvent with data) and the browser's own
// connection-error event arrive as "error".
es.addEventListener("error", (e) => log(["error", e.data || null, es.readyState]));
</script></body></html>
"""


async def test_event_source_survives_a_restart(async_chromium, pg_url, keys_file, http, tmp_path):
    proc = ServiceProcess(
        pg_url, env={"AUDITSYNC_KEYS_FILE": str(keys_file)}, log_path=tmp_path / "service.log"
    ).start()
    # The page's origin is a relay in front of the service, so the test reads the exact
    # request headers the browser sent (playwright does not show the Last-Event-ID that
    # Chromium's EventSource adds on reconnect).
    relay = await CuttableRelay(proc.port).start()
    origin = f"http://127.0.0.1:{relay.port}"
    page = None
    try:
        admin = Api(http, proc.url, bearer("admin"))
        topic = await admin.topic(unique(READER_PREFIX))
        await admin.append(topic, *range(1, 6))
        wid = (
            await Api(http, proc.url, bearer("reader")).watch(
                {"topics": {topic: {}}, "heartbeat_ms": 1000}
            )
        )["wid"]

        page = await async_chromium.new_page()
        page_url = f"{origin}/__test__/watch.html"
        await page.route(
            page_url,
            lambda route: route.fulfill(
                status=200,
                content_type="text/html; charset=utf-8",
                body=PAGE % {"wid": wid, "token": SECRETS["reader"]},
            ),
        )
        await page.goto(page_url)

        async def seqs_reach(n: int) -> list[int]:
            await page.wait_for_function(f"window.state.seqs.length >= {n}", timeout=20_000)
            return await page.evaluate("window.state.seqs")

        assert await seqs_reach(5) == [1, 2, 3, 4, 5]
        await page.wait_for_function(
            "window.state.events.some(e => e[0] === 'caught-up')", timeout=10_000
        )

        # Restart the service on the same port; the page is left to its own devices.
        await asyncio.to_thread(proc.stop)
        await asyncio.to_thread(proc.start)
        await admin.append(topic, *range(6, 9))
        assert await seqs_reach(8) == list(range(1, 9))
        await admin.append(topic, 9)
        assert await seqs_reach(9) == list(range(1, 10))  # each seq once, in order

        events = await page.evaluate("window.state.events")
        shutdown = json.dumps(
            {"code": "unavailable", "message": "the service is shutting down; reconnect"},
            separators=(",", ":"),
        )
        assert ["error", shutdown] in [e[:2] for e in events], events
        assert [e[0] for e in events].count("open") == 2, events

        # Every GET carried the token in the URL, Accept, and — once reconnecting — the id of
        # the last frame the page had processed (the caught-up after seq 5).
        sent = relay.stream_requests()
        assert len(sent) >= 2 and all(h["accept"] == "text/event-stream" for h in sent)
        assert "last-event-id" not in sent[0]
        assert {h["last-event-id"] for h in sent[1:]} == {cursor_id({topic: 5})}
        assert f"/v0/watch/{wid}?token={SECRETS['reader']} HTTP/1.1".encode() in relay.sent

        await page.screenshot(path=str(artifact("watch-browser.png")), full_page=True)
    finally:
        if page is not None:
            await page.close()
        await relay.stop()
        await asyncio.to_thread(proc.stop)
