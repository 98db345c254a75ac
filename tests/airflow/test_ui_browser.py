"""The plugin's page served by a real Airflow API server: anonymous requests get 401; a
logged-in browser (headless Chromium, the UI's ``_token`` cookie) at 1280 × 800 with every
non-loopback request blocked sees recent reconciliation runs (every column in the window, the
chart drawn, the filters working) and opens the Great Expectations Data Docs styled by the
plugin's own copies of their CDN assets; on the fault run's findings view it sees every column
of the first rows in the window, filters and pages them and downloads the CSV, which holds the
run's ``detail`` defect rows exactly, as ``auditsync pipeline findings --json`` prints them.
Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from auditsync_plugin.ui import assets
from auditsync_plugin.ui import report as ui_report
from auditsync_plugin.ui.runs import TopicLine
from spark_jobs import findings
from spark_jobs.common import selection
from spark_jobs.common.statuses import DEFECTS
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout

from ..browser import VIEWPORT, artifact, assert_within_the_window, block_the_internet
from ..support import free_port, stop
from .conftest import BIN, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.airflow, pytest.mark.timeout(900)]


def _status(url: str, headers: dict | None = None) -> int:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.fixture(scope="module")
def api_server(airflow_home, fault_run):
    """``airflow api-server`` on loopback, after the fault run, with a known admin password
    and the Data Docs' assets in the plugin (``make setup`` fetched them; a no-op then)."""
    assets.fetch()
    password = secrets.token_urlsafe(12)
    pw_file = Path(airflow_home.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    pw_file.write_text(json.dumps({"admin": password}))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(airflow_home.local / "api-server.log", "wb")
    proc = subprocess.Popen(
        [str(BIN / "airflow"), "api-server", "-H", "127.0.0.1", "-p", str(port), "-w", "1"],
        env={**airflow_home.env, "AIRFLOW__API__BASE_URL": base},
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=airflow_home.local,
    )
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"api-server exited {proc.returncode}: "
                    + (airflow_home.local / "api-server.log").read_text()[-3000:]
                )
            return _status(f"{base}/api/v2/monitor/health") == 200

        # a bound against a hang, not a target, like the shared home's migrate: at load 14-16
        # (this module beside another Airflow module and other suites) 120 s did not suffice
        wait_until(healthy, 600, "the Airflow API server to be healthy")
        req = urllib.request.Request(
            f"{base}/auth/token",
            method="POST",
            data=json.dumps({"username": "admin", "password": password}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            token = json.loads(resp.read())["access_token"]
        yield base, token
    finally:
        stop(proc, 30)
        log.close()


def test_anonymous_access_is_refused(api_server):
    base, token = api_server
    for path in (
        "/auditsync/",
        "/auditsync/runs.json",
        "/auditsync/docs/index.html",
        "/auditsync/static/report.css",
        "/auditsync/findings",
        "/auditsync/findings.csv",
    ):
        assert _status(base + path) == 401, path
        # A token that does not verify is refused too (Airflow answers 403 for those).
        assert _status(base + path, {"Authorization": "Bearer not-a-token"}) in (401, 403)
    assert _status(base + "/auditsync/", {"Authorization": f"Bearer {token}"}) == 200


def test_the_runs_json_carries_the_fault_run(api_server, fault_run):
    """(The failed phantom run's rows: ``test_phantom.py``, a unit of its own under xdist.)"""
    base, token = api_server
    req = urllib.request.Request(
        base + "/auditsync/runs.json", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        doc = json.loads(resp.read())
    assert doc["error"] is None
    by_run = {}
    for line in doc["runs"]:
        by_run.setdefault(line["run_id"], []).append(line)
    passed = by_run[fault_run.run_id]
    assert {line["run_status"] for line in passed} == {"passed"}
    assert sum(line["backfilled"] for line in passed) > 0
    assert sum(line["defects_left"] for line in passed) == 0


def docs_dir(home) -> Path:
    return home.gx_root / "gx" / "uncommitted" / "data_docs" / "local_site"


def test_the_vendored_scripts_match_the_integrity_gx_pins():
    """GX pins popper and bootstrap's JS by sha384; the npm copies must be those bytes."""
    from auditsync_plugin.ui.app import gx_images_dir

    assets.fetch()

    imports = (gx_images_dir().parent.parent / "templates" / "js_script_imports.j2").read_text()
    pinned = re.findall(r'src="([^"]+)" integrity="sha384-([^"]+)"', imports)
    assert len(pinned) == 2
    for url, digest in pinned:
        body = (assets.DEFAULT_DIR / assets.CDN[url]).read_bytes()
        assert base64.b64encode(hashlib.sha384(body).digest()).decode() == digest, url


def test_a_logged_in_browser_sees_the_runs_and_the_data_docs(
    api_server, fault_run, airflow_home, chromium
):
    base, token = api_server
    with urllib.request.urlopen(
        urllib.request.Request(
            base + "/auditsync/runs.json", headers={"Authorization": f"Bearer {token}"}
        ),
        timeout=10,
    ) as resp:
        doc = json.loads(resp.read())
    run_ids = list(dict.fromkeys(line["run_id"] for line in doc["runs"]))
    # A run that failed before reconcile has one line with no topic; it is no topic.
    topics = sorted({line["topic"] for line in doc["runs"] if line["topic"]})
    context = chromium.new_context(viewport=VIEWPORT)
    refused = block_the_internet(context)
    context.add_cookies([{"name": "_token", "value": token, "url": base}])
    page = context.new_page()
    resp = page.goto(f"{base}/auditsync/")
    assert resp is not None and resp.status == 200
    rows = page.locator("#runs tbody tr")
    assert rows.count() >= 2
    assert page.locator(f"#runs td:text-is('{fault_run.run_id}')").count() >= 1
    # The fault run repaired all it found: none of its lines has a defect left.
    fault_rows = page.locator(f"#runs tr:has(td:text-is('{fault_run.run_id}'))")
    assert fault_rows.count() >= 2 and fault_rows.locator("td.bad").count() == 0
    # Every column of both tables inside the 1280 px window, nothing scrolled sideways.
    assert assert_within_the_window(page, "#runs thead th") == 9
    assert assert_within_the_window(page, "#lags thead th") == 6
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]
    # The chart: one bar of each series per run (newest 12), oldest first.
    charted = run_ids[:12][::-1]
    for css in ("bar-delivered", "bar-found", "bar-left"):
        bars = page.locator(f"#chart rect.{css}")
        assert [b.get_attribute("data-run") for b in bars.all()] == charted, css
    # A run's delivered bar has height exactly when it delivered something (a run whose
    # compact failed, such as test_failed_run's on this worker, delivered nothing).
    delivered: dict[str, int] = {}
    for line in doc["runs"]:
        delivered[line["run_id"]] = delivered.get(line["run_id"], 0) + line["delivered"]
    heights = {
        b.get_attribute("data-run"): float(b.get_attribute("height"))
        for b in page.locator("#chart rect.bar-delivered").all()
    }
    assert {r: h > 0 for r, h in heights.items()} == {r: delivered.get(r, 0) > 0 for r in charted}
    # Each (consumer, topic)'s state at a glance, from its newest run: as many cards of
    # each verdict as the data says (which run is newest for a topic depends on what
    # other tests of the session's worker ran before it).
    states = ui_report.topic_states(TopicLine(**line) for line in doc["runs"])
    assert page.locator("#topics li.card").count() == len(states) >= len(topics)
    for verdict in {s.verdict for s in states}:
        cards = page.locator(f"#topics li[data-verdict='{verdict}']").count()
        assert cards == sum(s.verdict == verdict for s in states), verdict
    lag_rows = page.locator("#lags tbody tr").count()
    assert lag_rows >= len(topics)
    page.screenshot(path=str(artifact("auditsync-runs.png")), full_page=True)

    # The topic filter keeps that topic's lines only, in the table, cards and lags.
    page.select_option("#filter-topic", topics[0])
    with page.expect_navigation():
        page.click("#filters button")
    cells = page.locator("#runs tbody td:nth-child(3) .muted").all_inner_texts()
    assert cells and set(cells) == {topics[0]}
    assert page.locator("#topics li.card").count() == 1
    page.goto(f"{base}/auditsync/")

    with page.expect_navigation():
        page.click("#data-docs")
    assert page.url.endswith("/auditsync/docs/index.html")
    assert page.title() == "Data Docs created by Great Expectations"
    assert fault_run.run_id in page.content()
    assert_data_docs_styled(page)
    page.screenshot(path=str(artifact("auditsync-data-docs-index.png")))
    report = next(docs_dir(airflow_home).glob("validations/audit_log/*/*/*.html"))
    rel = report.relative_to(docs_dir(airflow_home)).as_posix()
    resp = page.goto(f"{base}/auditsync/docs/{rel}")
    assert resp is not None and resp.status == 200
    assert page.get_by_text("Succeeded").count() >= 1
    assert_data_docs_styled(page)
    assert page.evaluate("typeof vegaEmbed") == "function"
    page.screenshot(path=str(artifact("auditsync-data-docs.png")), full_page=True)
    assert refused == [], refused

    # The same page inside Airflow's own UI (Browse → Reconciliation, an iframe).
    page.goto(f"{base}/plugin/auditsync")
    frame = page.frame_locator("iframe").first
    frame.locator("#runs").wait_for(timeout=30_000)
    inner = page.locator("iframe").first.element_handle().content_frame()
    assert inner is not None and inner.url == f"{base}/auditsync/"
    inner.wait_for_load_state("load")  # its style sheet applied before the picture
    assert assert_within_the_window(frame, "#runs thead th") == 9
    page.screenshot(path=str(artifact("auditsync-in-airflow.png")))
    assert refused == [], refused


def assert_data_docs_styled(page) -> None:
    """Bootstrap applied (a flex navbar), jQuery and bootstrap-table running, the logo and
    font-awesome loaded: what a page fed by unreachable CDNs lacks."""
    page.wait_for_load_state("load")
    nav = page.evaluate(
        """() => { const s = getComputedStyle(document.querySelector('nav.navbar'));
                   return [s.display, s.position]; }"""
    )
    assert nav == ["flex", "sticky"], nav
    assert page.evaluate("typeof jQuery === 'function' && typeof jQuery.fn.bootstrapTable")
    assert page.evaluate("document.querySelector('nav.navbar img').naturalWidth") > 0
    loaded = page.evaluate(
        """async () => (await document.fonts.load('900 16px "Font Awesome 6 Free"')).length"""
    )
    assert loaded > 0


def detail_defects(run, pg_url: str) -> list[dict]:
    """The run's findings as its ``detail`` partition says, by hand: each defect range, in
    (consumer, topic, seq) order, repaired, since its verify passed and left nothing."""
    layout = Layout("", str(run.warehouse), "")
    left = readers.scan(readers.load(layout, pg_url, "remaining")).to_pylist()
    assert [r for r in left if r["verify_run"] == run.run_id] == []
    detail = readers.scan(readers.load(layout, pg_url, "detail")).to_pylist()
    ranges = sorted(
        (d["consumer"], d["topic"], d["seq"], d["seq_to"], d["status"])
        for d in detail
        if d["run_id"] == run.run_id and d["status"] in DEFECTS
    )
    return [
        dict(zip(findings.COLUMNS, (c, t, status, seq, to, to - seq + 1, 0, "yes")))
        for c, t, seq, to, status in ranges
    ]


def csv_text_rows(text: str) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(text)))
    ints = ("seq_from", "seq_to", "seqs", "left")
    return [{k: int(v) if k in ints else v for k, v in r.items()} for r in rows]


def assert_in_the_viewport(page, selector: str) -> int:
    """Every element matched lies wholly inside the 1280 × 800 viewport (no scrolling)."""
    boxes = [el.bounding_box() for el in page.locator(selector).all()]
    assert boxes and all(b is not None for b in boxes), selector
    for b in boxes:
        assert b["x"] >= 0 and b["y"] >= 0, (selector, b)
        assert b["x"] + b["width"] <= VIEWPORT["width"], (selector, b)
        assert b["y"] + b["height"] <= VIEWPORT["height"], (selector, b)
    return len(boxes)


def shown_rows(page) -> list[list[str]]:
    return [r.locator("td").all_inner_texts() for r in page.locator("#findings tbody tr").all()]


def as_cells(rows: list[dict]) -> list[list[str]]:
    return [[str(r[k]) for k in findings.COLUMNS] for r in rows]


def test_the_findings_view_of_the_fault_run(api_server, fault_run, pg_url, chromium):
    """The fault run's findings through the real API server: the CSV download is its detail
    defect rows, the CLI prints the same, the page shows them at 1280 × 800, filtered, paged
    (50 and 10 rows a page)."""
    base, token = api_server
    want = detail_defects(fault_run, pg_url)
    assert want  # the sink's drops and corruptions
    # The summary counts the same seqs per (topic, status), none of them left.
    counted = {(t, s): (n, left) for _, t, s, n, left, _ in fault_run.facts["summary"]}
    for key in {(r["topic"], r["status"]) for r in want}:
        seqs = sum(r["seqs"] for r in want if (r["topic"], r["status"]) == key)
        assert counted[key] == (seqs, 0), key
    assert {k for k, (n, _) in counted.items() if k[1] in DEFECTS and n} == {
        (r["topic"], r["status"]) for r in want
    }

    cli = subprocess.run(
        [str(BIN / "auditsync"), "pipeline", "findings", "--run", fault_run.run_id]
        + ["--work", str(fault_run.warehouse), "--json", "--database-url", pg_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (cli.returncode, cli.stderr) == (0, ""), cli.stderr
    assert [json.loads(line) for line in cli.stdout.splitlines()] == want

    pages = -(-len(want) // selection.FINDINGS_PAGE)
    first = want[: selection.FINDINGS_PAGE]
    context = chromium.new_context(viewport=VIEWPORT, accept_downloads=True)
    refused = block_the_internet(context)
    context.add_cookies([{"name": "_token", "value": token, "url": base}])
    page = context.new_page()
    url = f"{base}/auditsync/findings?run={fault_run.run_id}"
    resp = page.goto(url)
    assert resp is not None and resp.status == 200
    page.wait_for_load_state("load")  # the style sheet applied before measuring
    assert shown_rows(page) == as_cells(first)
    # Every column header and every cell of the first rows wholly in the viewport.
    assert assert_in_the_viewport(page, "#findings thead th") == len(findings.COLUMNS)
    top = min(5, len(first))
    for n in range(1, top + 1):
        cells = assert_in_the_viewport(page, f"#findings tbody tr:nth-child({n}) td")
        assert cells == len(findings.COLUMNS)
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]
    assert page.inner_text("#pager span") == (
        f"page 1 of {pages} ({len(want)} of {len(want)} ranges)"
    )
    page.screenshot(path=str(artifact("findings-airflow.png")), full_page=True)

    # The CSV download, in the logged-in browser through the API server.
    with page.expect_download() as info:
        page.click("#csv")
    download = info.value
    assert download.suggested_filename == f"findings-{fault_run.run_id}.csv"
    text = Path(download.path()).read_text()
    assert text.splitlines()[0] == ",".join(findings.COLUMNS)
    assert csv_text_rows(text) == want

    # Paging: each next page holds the next FINDINGS_PAGE ranges, the last the rest.
    for number in range(2, pages + 1):
        with page.expect_navigation():
            page.click("#pager a:text-is('next →')")
        start = (number - 1) * selection.FINDINGS_PAGE
        assert shown_rows(page) == as_cells(want[start : start + selection.FINDINGS_PAGE])
        assert page.inner_text("#pager span").startswith(f"page {number} of {pages}")
    assert page.locator("#pager a:text-is('next →')").count() == 0

    # Ten rows a page (the rows selector), every page in turn: the run's real ranges
    # over several pages, the size kept by the pager's links.
    page.goto(url)
    page.select_option("#filter-rows", "10")
    with page.expect_navigation():
        page.click("#filters button")
    small = -(-len(want) // 10)
    assert small >= 2, len(want)
    for number in range(1, small + 1):
        if number > 1:
            with page.expect_navigation():
                page.click("#pager a:text-is('next →')")
        assert shown_rows(page) == as_cells(want[(number - 1) * 10 : number * 10])
        assert page.inner_text("#pager span") == (
            f"page {number} of {small} ({len(want)} of {len(want)} ranges)"
        )
    assert page.locator("#pager a:text-is('next →')").count() == 0

    # The filter: the rarest status of one topic and the consumer, all three at once.
    statuses = [r["status"] for r in want]
    status = min(sorted(set(statuses)), key=statuses.count)
    pick = next(r for r in want if r["status"] == status)
    chosen = {"consumer": pick["consumer"], "topic": pick["topic"], "status": status}
    kept = [r for r in want if all(r[k] == v for k, v in chosen.items())]
    page.goto(url)
    for name, value in chosen.items():
        page.select_option(f"#filter-{name}", value)
    with page.expect_navigation():
        page.click("#filters button")
    assert shown_rows(page) == as_cells(kept[: selection.FINDINGS_PAGE])
    assert page.inner_text("#pager span") == (
        f"page 1 of {-(-len(kept) // selection.FINDINGS_PAGE)} ({len(kept)} of {len(want)} ranges)"
    )
    with page.expect_download() as info:
        page.click("#csv")
    assert csv_text_rows(Path(info.value.path()).read_text()) == kept
    assert refused == [], refused
