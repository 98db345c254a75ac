"""Alerts from the shared ``airflow dags test audit_sync`` runs (``conftest.py``), received by a
real SMTP server and a real webhook receiver on loopback: the faulty run (defects found, all
repaired) and the phantom runs (verify fails) each alert once per channel, with the counts, the
exact defect ranges (the faults the sink injected) and links to the Reconciliation page and
the run's findings view, and the ledger holds exactly one row per Airflow
run, kind and channel. The e-mails are rendered by headless Chromium into ``test-artifacts/``."""

from __future__ import annotations

import collections
import subprocess
import tempfile
from pathlib import Path

import pytest

from auditsync_plugin import alerts_render
from watch_service.sink.landing import Landing
from watch_service.storage import Storage

from .conftest import CONSUMER, pg_rows

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
BASE = "http://127.0.0.1:8080"  # [api] base_url airflow_env derives (default port)
LEDGER = (
    "SELECT run_id, kind, channel FROM alerts_sent WHERE dag_id = 'audit_sync' ORDER BY 1, 2, 3"
)


def airflow_run_id(text: str) -> str:
    return next(x for x in text.splitlines() if x.startswith("Airflow run: ")).split(": ", 1)[1]


def fault_seqs(landing_dir) -> dict[tuple[str, str], list[int]]:
    """(kind, topic) -> the seqs the sink's fault injection dropped or corrupted."""
    out: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for kind, topic, seq in Landing(Storage.at(landing_dir), CONSUMER).load_faults():
        out[(kind, topic)].append(int(seq))
    return out


def html_of(message) -> str:
    return message.get_body(("html",)).get_content()


def screenshot(html: str, png: Path) -> None:
    png.parent.mkdir(parents=True, exist_ok=True)
    page = png.with_suffix(".html")
    page.write_text(html, encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                "/usr/bin/chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                "--window-size=1280,800",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    assert png.stat().st_size > 10_000


def test_a_run_whose_defects_were_all_repaired_alerts_once_per_channel(
    fault_run, landing, alert_receivers, pg_url
):
    smtp, hook = alert_receivers
    assert fault_run.returncode == 0, fault_run.output[-3000:]
    found = sum(landing.faults.values())
    title = f"[auditsync] audit_sync: run {fault_run.run_id} found {found} defects (all repaired)"
    [mail] = smtp.wait_for(lambda m: m["Subject"] == title, 30, "the defects e-mail")
    assert mail["X-Envelope-To"] == "ops@example.com" and mail["From"] == "auditsync@localhost"
    [(path, body)] = hook.wait_for(lambda i: i[1]["text"].startswith(title), 30, "the webhook")
    assert path == "/hook/alerts" and list(body) == ["text"]
    text = body["text"]
    page = html_of(mail)
    faults = fault_seqs(fault_run.landing)
    run = f"{BASE}/auditsync/findings?run={fault_run.run_id}"
    for topic in landing.topics:
        if topic == landing.capped:
            continue
        for kind, status in (("drop", "silent_gap"), ("corrupt", "mismatch")):
            seqs = faults.get((kind, topic))
            if seqs:
                shown = alerts_render.format_ranges(seqs)
                expected = f"- {CONSUMER}/{topic} {status}: found {len(seqs)}, left 0, seqs {shown}"
                assert expected in text.splitlines(), (expected, text)
                assert f"<td>{shown}</td>" in page
                link = f"{run}&amp;consumer={CONSUMER}&amp;topic={topic}&amp;status={status}"
                assert f'<a href="{link}">findings</a>' in page
    assert f"<tr><th>defects found</th><td>{found}</td></tr>" in page
    assert f"Reconciliation page: {BASE}/auditsync/" in text
    assert f"Findings: {run}" in text
    run_id = airflow_run_id(text)
    assert (run_id, "defects_found", "email") in pg_rows(pg_url, LEDGER)
    assert (run_id, "defects_found", "webhook") in pg_rows(pg_url, LEDGER)
    screenshot(page, ARTIFACTS / "alert-email.png")


def test_a_failed_verify_alerts_once_even_when_its_interval_runs_again(
    phantom_run, phantom_connect_run, alert_receivers, pg_url
):
    """The phantom's interval runs twice (spark-submit, then Spark Connect; ``dags test`` gives
    each its own Airflow run id): verify fails both times, each failure sent once per channel."""
    smtp, hook = alert_receivers
    topic, seq = phantom_run.facts["phantom"]
    assert phantom_run.states["verify"] == phantom_connect_run.states["verify"] == "failed"
    prefix = f"[auditsync] audit_sync: verify failed for run {phantom_run.run_id}"
    mails = smtp.wait_for(lambda m: m["Subject"].startswith(prefix), 30, "the verify e-mail")
    posts = hook.wait_for(lambda i: i[1]["text"].startswith(prefix), 30, "the verify webhook")
    ledger = [r for r in pg_rows(pg_url, LEDGER) if r[1] == "verify_failed"]
    runs = {r[0] for r in ledger}
    assert sorted(ledger) == sorted(
        (r, "verify_failed", c) for r in runs for c in ("email", "webhook")
    )
    assert len(mails) == len(posts) == len(runs)  # once per Airflow run and channel
    for mail, (_, body) in zip(mails, posts):
        assert mail["Subject"].endswith("defects remain after backfill")
        line = f"- {CONSUMER}/{topic} phantom: found 1, left 1"
        assert any(
            x.startswith(line) and x.endswith(f"still defective {seq}")
            for x in body["text"].splitlines()
        )
        assert f"<td>{seq}</td>" in html_of(mail)
    screenshot(html_of(mails[0]), ARTIFACTS / "alert-email-verify-failed.png")
