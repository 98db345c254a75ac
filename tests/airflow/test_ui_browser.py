"""The plugin's page served by a real Airflow API server: anonymous requests get 401; a
logged-in browser (headless Chromium, the UI's ``_token`` cookie) sees recent reconciliation
runs and opens the Great Expectations Data Docs. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ..support import free_port
from .conftest import BIN, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.airflow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


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
def api_server(airflow_home, fault_run, phantom_run):
    """``airflow api-server`` on loopback, after both DAG runs, with a known admin password."""
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

        wait_until(healthy, 120, "the Airflow API server to be healthy")
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
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_anonymous_access_is_refused(api_server):
    base, token = api_server
    for path in ("/auditsync/", "/auditsync/runs.json", "/auditsync/docs/index.html"):
        assert _status(base + path) == 401, path
        # A token that does not verify is refused too (Airflow answers 403 for those).
        assert _status(base + path, {"Authorization": "Bearer not-a-token"}) in (401, 403)
    assert _status(base + "/auditsync/", {"Authorization": f"Bearer {token}"}) == 200


def test_the_runs_json_carries_both_runs(api_server, fault_run, phantom_run):
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
    passed, failed = by_run[fault_run.run_id], by_run[phantom_run.run_id]
    assert {line["run_status"] for line in passed} == {"passed"}
    assert sum(line["backfilled"] for line in passed) > 0
    assert sum(line["defects_left"] for line in passed) == 0
    assert sum(line["defects_left"] for line in failed) == 1


def docs_dir(home) -> Path:
    return home.gx_root / "gx" / "uncommitted" / "data_docs" / "local_site"


def test_a_logged_in_browser_sees_the_runs_and_the_data_docs(api_server, fault_run, airflow_home):
    from playwright.sync_api import sync_playwright

    base, token = api_server
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS[1:])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.add_cookies([{"name": "_token", "value": token, "url": base}])
            page = context.new_page()
            resp = page.goto(f"{base}/auditsync/")
            assert resp is not None and resp.status == 200
            rows = page.locator("#runs tbody tr")
            assert rows.count() >= 2
            assert page.locator(f"#runs td:text-is('{fault_run.run_id}')").count() >= 1
            assert page.locator("#runs td.bad").count() == 1  # the phantom run's defect
            page.screenshot(path=str(ARTIFACTS / "auditsync-runs.png"), full_page=True)

            with page.expect_navigation():
                page.click("#data-docs")
            assert page.url.endswith("/auditsync/docs/index.html")
            # Data Docs style themselves from CDNs (not reachable here): check the content.
            assert page.title() == "Data Docs created by Great Expectations"
            assert fault_run.run_id in page.content()
            report = next(docs_dir(airflow_home).glob("validations/audit_log/*/*/*.html"))
            rel = report.relative_to(docs_dir(airflow_home)).as_posix()
            resp = page.goto(f"{base}/auditsync/docs/{rel}")
            assert resp is not None and resp.status == 200
            assert page.get_by_text("Succeeded").count() >= 1
            page.screenshot(path=str(ARTIFACTS / "auditsync-data-docs.png"), full_page=True)

            # The same page inside Airflow's own UI (Browse → Reconciliation, an iframe).
            page.goto(f"{base}/plugin/auditsync")
            frame = page.frame_locator("iframe").first
            frame.locator("#runs").wait_for(timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "auditsync-in-airflow.png"))
        finally:
            browser.close()
