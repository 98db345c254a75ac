"""Operations alerts through Airflow's notifier interface: the I/O shell around ``alerts.py``.

:class:`AuditsyncAlert` is the callback the DAG wires (verify's success and failure, the sink
sensor's failure); :func:`deadline_missed` is the deadline alert's callback. Each reads its
facts — the run tables in PostgreSQL (``watch_service.store.runs`` / ``.alerts``), the run's
defect ranges (``spark_jobs.findings``, as the findings view reads them), the sinks' cursors
and the service's heads — builds one :class:`~.alerts.Alert` and hands it to the configured
channels: e-mail through the SMTP provider's ``SmtpNotifier``, and the HTTP provider's
``HttpNotifier`` (``{"text": …}``, accepted by Slack and Teams incoming webhooks).

Each channel sends a run's alert of one kind once: a row in ``alerts_sent`` is claimed before
sending and given back if the send fails, so a retried task, a re-run of the same Airflow run
or a second callback process does not send it again. No channel configured (the default): no
callbacks are wired at all.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from typing import Any

from airflow.sdk.bases.notifier import BaseNotifier

from . import alerts, alerts_render
from .alerts import Alert

PG_CONN_ID = "auditsync_pg"
WEBHOOK_CONN_ID = "auditsync_alert_webhook"
SMTP_CONN_ID = "smtp_default"
FROM_EMAIL = "auditsync@localhost"
WEBHOOK_TIMEOUT_S = 10.0
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AlertSettings:
    """Which channels alerts go to; built from the DAG file's environment (parse time)."""

    email_to: tuple[str, ...] = ()
    smtp_conn_id: str = SMTP_CONN_ID
    from_email: str = FROM_EMAIL
    webhook_conn_id: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.email_to or self.webhook_conn_id)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AlertSettings:
        """``AUDITSYNC_ALERT_EMAIL`` (recipients, comma- or semicolon-separated),
        ``AUDITSYNC_ALERT_SMTP_CONN``, ``AUDITSYNC_ALERT_FROM``, ``AUDITSYNC_ALERT_WEBHOOK_CONN``
        (``airflow_env`` sets it, and the connection, from ``AUDITSYNC_ALERT_WEBHOOK``)."""
        to = tuple(a for a in re.split(r"\s*[,;]\s*", env.get("AUDITSYNC_ALERT_EMAIL", "")) if a)
        return cls(
            email_to=to,
            smtp_conn_id=env.get("AUDITSYNC_ALERT_SMTP_CONN") or SMTP_CONN_ID,
            from_email=env.get("AUDITSYNC_ALERT_FROM") or FROM_EMAIL,
            webhook_conn_id=env.get("AUDITSYNC_ALERT_WEBHOOK_CONN", ""),
        )

    def as_kwargs(self) -> dict[str, Any]:
        """JSON-safe, for a deadline callback's stored kwargs."""
        return {**dataclasses.asdict(self), "email_to": list(self.email_to)}


def airflow_base_url() -> str:
    from airflow.sdk.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")


def webhook_notifier(text: str, webhook_conn_id: str = WEBHOOK_CONN_ID) -> BaseNotifier:
    """The HTTP provider's ``HttpNotifier`` POSTing ``{"text": text}`` as JSON to connection
    ``webhook_conn_id`` (an ``http`` connection whose host is the whole incoming-webhook URL,
    which ``HttpHook`` takes as the base URL). The URL is masked in the logs first: a webhook's
    path is its credential, and the hook logs the URL it calls."""
    from airflow.providers.http.notifications.http import HttpNotifier
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    conn = BaseHook.get_connection(webhook_conn_id)
    if conn.host:
        mask_secret(conn.host)
    return HttpNotifier(
        http_conn_id=webhook_conn_id,
        json={"text": text},
        headers={"Content-Type": "application/json"},
        extra_options={"timeout": WEBHOOK_TIMEOUT_S},
    )


def _email(settings: AlertSettings, alert: Alert) -> None:
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    # notify(), not __call__: the rendered alert is sent as it is, never re-read as a template.
    SmtpNotifier(
        to=list(settings.email_to),
        from_email=settings.from_email,
        subject=alerts_render.subject(alert),
        html_content=alerts_render.html(alert),
        smtp_conn_id=settings.smtp_conn_id,
    ).notify({})


def _webhook(settings: AlertSettings, alert: Alert) -> None:
    webhook_notifier(alerts_render.text(alert), settings.webhook_conn_id).notify({})


def channels(settings: AlertSettings) -> list[tuple[str, Callable[[AlertSettings, Alert], None]]]:
    out: list[tuple[str, Callable[[AlertSettings, Alert], None]]] = []
    if settings.email_to:
        out.append(("email", _email))
    if settings.webhook_conn_id:
        out.append(("webhook", _webhook))
    return out


def deliver(alert: Alert, settings: AlertSettings, pg_conn_id: str = PG_CONN_ID) -> list[str]:
    """Send ``alert`` on every channel that has not sent it yet; the channels used."""
    from watch_service.store import alerts as ledger

    from ..hooks.pipeline_runs import PipelineRunsHook

    used = []
    with closing(PipelineRunsHook(pg_conn_id).get_conn()) as conn:
        for name, send in channels(settings):
            key = (alert.dag_id, alert.run_id, alert.kind, name)
            claimed = ledger.claim(conn, *key, summary=alert.title)
            conn.commit()
            if not claimed:
                log.info("alert %s already sent by %s for %s", alert.kind, name, alert.run_id)
                continue
            try:
                send(settings, alert)
            except Exception:
                ledger.release(conn, *key)
                conn.commit()
                raise
            log.info("alert %s sent by %s: %s", alert.kind, name, alert.title)
            used.append(name)
    return used


def _ids(context: Mapping[str, Any]) -> tuple[str, str]:
    run = context["dag_run"]
    if isinstance(run, Mapping):  # a deadline callback's context: the run as JSON
        return str(run["dag_id"]), str(run["dag_run_id"])
    return str(run.dag_id), str(run.run_id)


class AuditsyncAlert(BaseNotifier):
    """``kind``: ``defects_found`` / ``verify_failed`` (``pipeline_run_id``: the run to report)
    or ``sink_lag`` (``landing``, ``consumers``: what the sensor waited for)."""

    template_fields = ("pipeline_run_id", "landing", "consumers")

    def __init__(
        self,
        *,
        kind: str,
        settings: AlertSettings,
        pipeline_run_id: str = "",
        landing: str = "",
        consumers: str = "",
        pg_conn_id: str = PG_CONN_ID,
        watch_conn_id: str = "auditsync_watch",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if kind not in alerts.KINDS:
            raise ValueError(f"unknown alert kind {kind!r}; expected one of {alerts.KINDS}")
        self.kind = kind
        self.settings = settings
        self.pipeline_run_id = pipeline_run_id
        self.landing = landing
        self.consumers = consumers
        self.pg_conn_id = pg_conn_id
        self.watch_conn_id = watch_conn_id

    def notify(self, context: Any) -> None:
        dag_id, run_id = _ids(context)
        error = str(context.get("exception") or "")
        if self.kind == alerts.SINK_LAG:
            alert: Alert | None = self._lag(context, dag_id, run_id, error)
        else:
            alert = self._run(dag_id, run_id, error)
        if alert is not None:
            deliver(alert, self.settings, self.pg_conn_id)

    def _run(self, dag_id: str, run_id: str, error: str) -> Alert | None:
        from spark_jobs.common.statuses import DEFECTS
        from watch_service.store import alerts as ledger
        from watch_service.store import runs

        from ..hooks.pipeline_runs import PipelineRunsHook, pipeline_database_url

        with closing(PipelineRunsHook(self.pg_conn_id).get_conn()) as conn:
            row = runs.get_run(conn, self.pipeline_run_id)
            summary = runs.run_summary(conn, self.pipeline_run_id)
            windows = ledger.run_windows(conn, self.pipeline_run_id)
        base = airflow_base_url()
        found = self._ranges(pipeline_database_url(self.pg_conn_id))
        lines = alerts.findings(summary, windows, DEFECTS, base, self.pipeline_run_id, found)
        return alerts.run_alert(
            self.kind, dag_id, run_id, self.pipeline_run_id, row, lines, base, error
        )

    def _ranges(self, database_url: str) -> list[dict[str, Any]]:
        """The run's defect ranges, as its findings view shows them; none when the warehouse
        cannot be read (the alert then names the windows judged: it is sent regardless)."""
        from spark_jobs import findings

        try:
            return findings.read(database_url, self.pipeline_run_id)
        except Exception as exc:
            log.warning("alert: cannot read the findings of %s: %s", self.pipeline_run_id, exc)
            return []

    def _lag(self, context: Any, dag_id: str, run_id: str, error: str) -> Alert:
        from ..hooks.landing_store import landing_storage
        from ..hooks.watch_service import WatchServiceError, WatchServiceHook
        from ..sink_cursors import decide, read_positions, split_consumers

        end = context.get("data_interval_end") or context.get("logical_date")
        end_s = end.timestamp() if end is not None else time.time()
        positions, missing = read_positions(
            landing_storage(self.landing), split_consumers(self.consumers)
        )
        try:
            heads: dict[str, int] | None = WatchServiceHook(self.watch_conn_id).get_heads()
        except WatchServiceError as exc:
            heads, error = None, f"{error}\n(service: {exc})".strip()
        decision = decide(time.time(), end_s, positions, missing, heads)
        lags = [alerts.Lagging(g.consumer, g.topic, g.cursor, g.head) for g in decision.lags]
        reason = f"{error}\nnow: {decision.reason}".strip()
        return alerts.lag_alert(dag_id, run_id, lags, reason, airflow_base_url())


def deadline_missed(context: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """The deadline alert's callback (run by the executor when a deadline passes)."""
    run = context["dag_run"]
    dag_id, run_id = _ids(context)
    deadline = str((context.get("deadline") or {}).get("deadline_time") or "")
    interval = (str(run.get("data_interval_start")), str(run.get("data_interval_end")))
    alert = alerts.deadline_alert(dag_id, run_id, interval, deadline, airflow_base_url())
    config = AlertSettings(**{**settings, "email_to": tuple(settings.get("email_to") or ())})
    deliver(alert, config)


def run_callbacks(settings: AlertSettings, pipeline_run_id: str) -> dict[str, Any]:
    """verify's callbacks: defects found (it passed), verify failed (it failed for good)."""
    if not settings.enabled:
        return {}
    return {
        "on_success_callback": AuditsyncAlert(
            kind=alerts.DEFECTS_FOUND, settings=settings, pipeline_run_id=pipeline_run_id
        ),
        "on_failure_callback": AuditsyncAlert(
            kind=alerts.VERIFY_FAILED, settings=settings, pipeline_run_id=pipeline_run_id
        ),
    }


def sensor_callbacks(settings: AlertSettings, landing: str, consumers: str) -> dict[str, Any]:
    """The sink sensor's callback: which consumers lag, by how many seqs."""
    if not settings.enabled:
        return {}
    alert = AuditsyncAlert(
        kind=alerts.SINK_LAG, settings=settings, landing=landing, consumers=consumers
    )
    return {"on_failure_callback": alert}
