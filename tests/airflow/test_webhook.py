"""The alert webhook through the HTTP provider's ``HttpNotifier``: a real HTTP server on
loopback receives exactly ``{"text": …}`` as JSON, and a refused post raises (so
``notifiers.deliver`` gives the once-per-run ledger's claim back and a retry sends it)."""

from __future__ import annotations

import json

import pytest

from auditsync_plugin.notifications.notifiers import webhook_notifier

from .receivers import WebhookReceiver

pytestmark = pytest.mark.airflow
CONN = "AIRFLOW_CONN_AUDITSYNC_ALERT_WEBHOOK"


@pytest.fixture
def receiver(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    with WebhookReceiver() as hook:
        yield hook


def test_the_alert_text_is_posted_as_json(receiver, monkeypatch):
    # the whole incoming-webhook URL is the connection's host, as airflow_env writes it
    monkeypatch.setenv(CONN, json.dumps({"conn_type": "http", "host": receiver.url("ops")}))
    webhook_notifier("3 silent gaps • orders 11–13").notify({})
    assert receiver.items == [("/hook/ops", {"text": "3 silent gaps • orders 11–13"})]


def test_a_refused_post_raises(receiver, monkeypatch):
    url = receiver.url("ops").replace("/hook/", "/missing/")
    monkeypatch.setenv(CONN, json.dumps({"conn_type": "http", "host": url}))
    with pytest.raises(Exception, match="404"):
        webhook_notifier("text").notify({})
    assert receiver.items == []
