"""Observability: the service's and the sink's Prometheus expositions after real traffic, the
Grafana dashboard checked against the series they really expose, the multi-worker sum, and the
JSON log and access log formats."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tests.sink.harness import config, running, state
from tests.support import ROOT, unique, wait_for
from tests.watch.wire import SSE, create, fields, open_stream
from watch_service.logs import JsonFormatter, OneLine
from watch_service.sink.metrics import serving
from watch_service.web.logs import AccessLogger
from watch_service.web.metrics import version, worker_exited

pytestmark = [pytest.mark.pg, pytest.mark.service]

DASHBOARD = ROOT / "watch_service" / "tools" / "grafana" / "auditsync-dashboard.json"
SUFFIXES = re.compile(r"_(bucket|sum|count|total)$")


def families(text: str) -> dict[str, list]:
    """{family name: samples}; counters are named without ``_total`` by the parser."""
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(samples: list, name: str, **labels: str) -> float:
    hits = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert hits, (name, labels, samples)
    return sum(hits)


async def scrape(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(f"{url}/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        return await r.text()


@pytest.fixture(scope="module")
async def exposed(service, http, tmp_path_factory) -> dict[str, dict[str, list]]:
    """Traffic through a service and a sink, then both expositions (read once per module)."""
    topic = unique("m")
    async with http.put(f"{service.url}/v0/topics/{topic}", json={}) as r:
        assert r.status == 201
    doc = await create(http, service.url, {"topics": {topic: {}}})
    stream = await open_stream(http, service.url, doc["wid"])
    await stream.frame()  # caught-up: live at the tail from here
    async with http.post(
        f"{service.url}/v0/topics/{topic}/records", json={"records": [{"data": 1}, {"data": 2}]}
    ) as r:
        assert r.status == 200
    assert fields(await stream.frame())["event"] == "record"
    async with http.get(f"{service.url}/v0/topics/{unique('missing')}") as r:
        assert r.status == 404
    during, written = await scrape(http, service.url), 2
    # The delivery lag is observed when the tailer pushes to the streams of its live set. A
    # stream joins it once drained, which can come after the append above (the stream then
    # read those records itself): append one more while none was pushed, up to 20.
    for n in range(3, 23):
        lag = families(during)["auditsync_delivery_lag_seconds"]
        if value(lag, "auditsync_delivery_lag_seconds_count") >= 1:
            break
        async with http.post(
            f"{service.url}/v0/topics/{topic}/records", json={"records": [{"data": n}]}
        ) as r:
            assert r.status == 200
        assert fields(await stream.frame())["event"] == "record"
        during, written = await scrape(http, service.url), n
    stream.close()

    landing = tmp_path_factory.mktemp("sink-metrics")
    cfg = config(landing, service.url, topics=(topic,), consumer="metrics")
    async with running(cfg) as run, serving(cfg.consumer, run.sink.stats, "127.0.0.1", 0) as port:

        def landed() -> bool:
            return state(cfg).get("cursors", {}).get(topic) == written

        await wait_for(landed, timeout=20, what="the sink to land every record")
        sink_text = await scrape(http, f"http://127.0.0.1:{port}")
    return {
        "service": families(during),
        "sink": families(sink_text),
        "topic": topic,
        "written": written,
    }


def test_service_exposition(exposed) -> None:
    m = exposed["service"]
    assert (
        value(m["auditsync_append_duration_seconds"], "auditsync_append_duration_seconds_count")
        >= 1
    )
    assert value(m["auditsync_delivery_lag_seconds"], "auditsync_delivery_lag_seconds_count") >= 1
    assert value(m["auditsync_records_appended"], "auditsync_records_appended_total") >= 2
    assert value(m["auditsync_open_streams"], "auditsync_open_streams") >= 1
    assert value(m["auditsync_frames_sent"], "auditsync_frames_sent_total", event="record") >= 1
    requests = m["auditsync_http_requests"]
    assert value(requests, "auditsync_http_requests_total", method="GET", status="404") >= 1
    route = "/v0/topics/{topic}/records"
    durations = m["auditsync_http_request_duration_seconds"]
    assert value(durations, "auditsync_http_request_duration_seconds_count", route=route) >= 1
    pool = m["auditsync_pool_connections"]
    assert value(pool, "auditsync_pool_connections", state="size") >= 1
    info = m["auditsync_build_info"]
    assert [s.labels["version"] for s in info] == [version()]


def test_sink_exposition(exposed) -> None:
    m, topic = exposed["sink"], exposed["topic"]
    written = exposed["written"]
    assert value(m["auditsync_sink_records"], "auditsync_sink_records_total") == written
    assert (
        value(m["auditsync_sink_cursor_seq"], "auditsync_sink_cursor_seq", topic=topic) == written
    )
    assert value(m["auditsync_sink_lag_records"], "auditsync_sink_lag_records", topic=topic) == 0
    assert value(m["auditsync_sink_reconnects"], "auditsync_sink_reconnects_total") == 0


def test_dashboard_uses_only_exposed_series(exposed) -> None:
    dash = json.loads(DASHBOARD.read_text())
    exposed_names = set(exposed["service"]) | set(exposed["sink"])
    used = set()
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= {SUFFIXES.sub("", n) for n in re.findall(r"auditsync_\w+", target["expr"])}
    assert used, "the dashboard queries nothing"
    assert used <= exposed_names, f"dashboard series not exposed: {sorted(used - exposed_names)}"
    # every family the service exposes is on the dashboard, so a new one is not forgotten
    assert set(exposed["service"]) <= used, sorted(set(exposed["service"]) - used)


WORKER = """
import sys
from watch_service.web.metrics import Metrics
m = Metrics()
m.appends.inc(int(sys.argv[1]))
m.open_streams.set(int(sys.argv[1]))
if sys.argv[2] == "render":
    sys.stdout.write(m.render().decode())
"""


def test_workers_share_one_exposition(tmp_path: Path) -> None:
    """Two processes with one PROMETHEUS_MULTIPROC_DIR: either one's /metrics is the sum."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-c", WORKER]
    first = subprocess.Popen([*run, "3", "-"], env=env, cwd=ROOT)
    assert first.wait(timeout=60) == 0
    worker_exited(first.pid, str(tmp_path))  # what the supervisor does when a worker ends
    out = subprocess.run(
        [*run, "4", "render"], env=env, check=True, cwd=ROOT, capture_output=True, text=True
    ).stdout
    m = families(out)
    assert value(m["auditsync_appends"], "auditsync_appends_total") == 7
    # "livesum": the first worker has ended, so only the live worker's streams count
    assert value(m["auditsync_open_streams"], "auditsync_open_streams") == 4
    assert len(m["auditsync_build_info"]) == 1


def test_json_log_lines() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger(unique("json"))
    log.addHandler(handler)
    log.propagate = False
    log.warning("stream %s ended", "w1", extra={"wid": "w1"})
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        log.exception("failed")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "WARNING" and first["message"] == "stream w1 ended"
    assert first["wid"] == "w1" and first["ts"].endswith("Z")
    assert second["message"] == "failed" and "ValueError: bad\nvalue" in second["exc"]


async def test_access_log_fields(http) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger(unique("access"))
    log.setLevel(logging.INFO)
    log.addHandler(Keep())
    log.propagate = False

    async def ok(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", ok)
    runner = web.AppRunner(app, access_log=log, access_log_class=AccessLogger)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        async with http.get(f"http://127.0.0.1:{port}/x?q=%0Ainjected", headers=SSE) as r:
            assert r.status == 200
        await wait_for(lambda: records, timeout=5, what="the access log line")
    finally:
        await runner.cleanup()
    rec = records[0]
    assert (rec.method, rec.path, rec.status) == ("GET", "/x", 200)  # type: ignore[attr-defined]
    assert "\n" not in rec.getMessage()


def test_repeated_warnings_are_one_line_and_throttled() -> None:
    now = [0.0]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(OneLine(window_s=30, clock=lambda: now[0]))
    log = logging.getLogger(unique("pool"))
    log.addHandler(handler)
    log.propagate = False
    refused = "connection failed: Connection refused\n\tIs the server running on that host?"
    for second in range(0, 60, 2):  # two a second would be 120 lines; one every 2 s is 30
        now[0] = float(second)
        log.warning("error connecting in %r: %s", "auditsync", refused)
    log.error("a different, worse thing")
    lines = out.getvalue().splitlines()
    one = "error connecting in 'auditsync': connection failed: Connection refused "
    assert lines == [
        one + "Is the server running on that host?",
        one + "Is the server running on that host? (and 14 more like it in 30 s)",
        "a different, worse thing",
    ]
