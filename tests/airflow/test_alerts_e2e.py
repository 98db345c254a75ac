"""Alerts from the shared ``airflow dags test audit_sync`` runs (``conftest.py``), received by a
real SMTP server and a real webhook receiver on loopback: the faulty run (defects found, all
repaired) alerts once per channel, with the counts, the exact defect ranges (the faults the sink
injected) and links to the Reconciliation page and the run's findings view, and the ledger
holds one row per Airflow run, kind and channel (a failed verify's alert: ``test_phantom.py``).
The e-mail is rendered by headless Chromium into ``test-artifacts/``."""

from __future__ import annotations

import collections

import pytest

from auditsync_plugin.notifications import alerts_render
from watch_service.sink.landing import Landing
from watch_service.storage import Storage

from ..browser import artifact
from .conftest import CONSUMER, pg_rows
from .receivers import LEDGER, html_of, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.timeout(900)]
BASE = "http://127.0.0.1:8080"  # [api] base_url airflow_env derives (default port)


def airflow_run_id(text: str) -> str:
    return next(x for x in text.splitlines() if x.startswith("Airflow run: ")).split(": ", 1)[1]


def fault_seqs(landing_dir) -> dict[tuple[str, str], list[int]]:
    """(kind, topic) -> the seqs the sink's fault injection dropped or corrupted."""
    out: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for kind, topic, seq in Landing(Storage.at(landing_dir), CONSUMER).load_faults():
        out[(kind, topic)].append(int(seq))
    return out


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
    screenshot(page, artifact("alert-email.png"))
