"""What an operations alert says, as pure functions: no socket, no database, no Airflow.

Four findings are worth waking someone for: a run found defects (even when backfill repaired
them all) or found the source rewound (``source_rewound``: the ranges its reconcile recorded in
the run's figures), verify failed, the sinks lag past the sensor's timeout, and a data interval
was not verified by its deadline. Each becomes one :class:`Alert` built from facts the I/O shell
(``notifiers.py``) read — the run tables in PostgreSQL, the sinks' cursors, Airflow's context —
and is rendered three ways: a subject line, plain text (the webhook's ``{"text": …}``, which
Slack and Microsoft Teams incoming webhooks both accept) and HTML for e-mail, through an
autoescaping Jinja2 template (``templates/alert_email.html``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2

DEFECTS_FOUND = "defects_found"
VERIFY_FAILED = "verify_failed"
SINK_LAG = "sink_lag"
DEADLINE_MISSED = "deadline_missed"
KINDS = (DEFECTS_FOUND, VERIFY_FAILED, SINK_LAG, DEADLINE_MISSED)

MAX_ROWS = 20  # table rows an alert shows; the page has the rest
MAX_RANGES = 5  # seq ranges shown per row
MAX_DETAIL = 2000  # characters of an error message kept
REWOUND_REASON = (
    "the source lost these acknowledged seqs (a failover to a lagging replica or a restore) "
    "and writes them again: consumers may hold other content for them"
)
TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One (consumer, topic, status) line of a run: found, left after backfill, the judged
    window (seqs in ``(window[0], window[1]]``), a few seqs still defective, the exact defect
    ranges (inclusive; empty when the run's findings could not be read) and the link to them
    in the findings view."""

    consumer: str
    topic: str
    status: str
    found: int
    remaining: int
    window: tuple[int, int] | None
    examples: tuple[int, ...]
    link: str
    spans: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class Lagging:
    consumer: str
    topic: str
    cursor: int
    head: int

    @property
    def behind(self) -> int:
        return self.head - self.cursor


@dataclasses.dataclass(frozen=True)
class Rewound:
    """A topic whose source went back: the seq ranges (inclusive) a run found rewound."""

    topic: str
    spans: tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class Alert:
    kind: str
    dag_id: str
    run_id: str  # Airflow's run id: with dag_id and kind, what is sent only once
    title: str
    facts: tuple[tuple[str, str], ...]
    findings: tuple[Finding, ...] = ()
    lags: tuple[Lagging, ...] = ()
    detail: str = ""
    links: tuple[tuple[str, str], ...] = ()
    rewinds: tuple[Rewound, ...] = ()


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges sorted, overlapping or adjacent ones merged: (9, 9), (3, 4), (5, 5) →
    (3, 5), (9, 9)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Seqs as inclusive ranges: 3, 4, 5, 9 → (3, 5), (9, 9)."""
    return merge_spans((seq, seq) for seq in seqs)


def format_spans(spans: Sequence[Sequence[int]], limit: int = MAX_RANGES) -> str:
    """Inclusive ranges as text, the first ``limit``: (3, 5), (9, 9) → "3–5, 9"."""
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans[:limit])
    return text + (f" and {len(spans) - limit} more" if len(spans) > limit else "")


def format_ranges(seqs: Iterable[int], limit: int = MAX_RANGES) -> str:
    return format_spans(ranges(seqs), limit)


def format_window(window: tuple[int, int] | None) -> str:
    """The judged window (seq_from, seq_to] as the inclusive range it covers."""
    if window is None or window[1] <= window[0]:
        return ""
    return f"{window[0] + 1}–{window[1]}"


def page_link(base_url: str, consumer: str = "", topic: str = "") -> str:
    """The Reconciliation page (the plugin's ``/auditsync/``), filtered to a consumer/topic."""
    query = urlencode({k: v for k, v in (("topic", topic), ("consumer", consumer)) if v})
    return f"{base_url.rstrip('/')}/auditsync/" + (f"?{query}" if query else "")


def findings_link(
    base_url: str, run_id: str, consumer: str = "", topic: str = "", status: str = ""
) -> str:
    """The run's findings view (the plugin's ``/auditsync/findings``), filtered."""
    chosen = (("consumer", consumer), ("topic", topic), ("status", status))
    query = urlencode({"run": run_id, **{k: v for k, v in chosen if v}})
    return f"{base_url.rstrip('/')}/auditsync/findings?{query}"


def run_link(base_url: str, dag_id: str, run_id: str) -> str:
    """The Airflow UI's page of one DAG run."""
    return f"{base_url.rstrip('/')}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def findings(
    summary: Iterable[Sequence],
    windows: Iterable[Sequence],
    defects: Sequence[str],
    base_url: str,
    run_id: str,
    found: Iterable[Mapping[str, Any]] = (),
) -> tuple[Finding, ...]:
    """The defect lines of pipeline run ``run_id``: ``summary`` rows are ``runs.run_summary``'s
    (consumer, topic, status, count, remaining, example_seqs), ``windows``
    ``alerts.run_windows``' (consumer, topic, seq_from, seq_to), ``found`` the run's defect
    ranges as ``spark_jobs.findings.build`` gives them (records are judged per seq, so a line
    shows adjacent ranges merged)."""
    judged = {(c, t): (int(a), int(b)) for c, t, a, b in windows}
    spans: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for r in found:
        key = (r["consumer"], r["topic"], r["status"])
        spans.setdefault(key, []).append((int(r["seq_from"]), int(r["seq_to"])))
    return tuple(
        Finding(
            consumer,
            topic,
            status,
            int(count),
            int(left or 0),
            judged.get((consumer, topic)),
            tuple(int(s) for s in examples or ()),
            findings_link(base_url, run_id, consumer, topic, status),
            tuple(merge_spans(spans.get((consumer, topic, status), ()))),
        )
        for consumer, topic, status, count, left, examples in summary
        if status in defects and int(count) > 0
    )


def rewinds(steps: Mapping[str, Any] | None) -> tuple[Rewound, ...]:
    """The topics a run found rewound, from its figures (``steps.reconcile.rewound``: topic →
    ``[[a, b], …]``), by topic."""
    found = ((steps or {}).get("reconcile") or {}).get("rewound") or {}
    return tuple(
        Rewound(topic, tuple((int(a), int(b)) for a, b in spans))
        for topic, spans in sorted(found.items())
        if spans
    )


def run_alert(
    kind: str,
    dag_id: str,
    run_id: str,
    pipeline_run_id: str,
    run_row: Sequence | None,
    lines: Sequence[Finding],
    base_url: str,
    error: str = "",
) -> Alert | None:
    """``defects_found`` (None when the run found no defect and no rewound source) or
    ``verify_failed``; ``run_row`` is ``runs.get_run``'s (status, defects_found,
    defects_remaining, steps) or None."""
    status, found, remaining, steps = run_row[:4] if run_row else (None, None, None, None)
    found = sum(f.found for f in lines) if found is None else int(found)
    remaining = sum(f.remaining for f in lines) if remaining is None else int(remaining)
    rewound = rewinds(steps)
    if kind == DEFECTS_FOUND and found == 0 and not rewound:
        return None
    topics = len({(f.consumer, f.topic) for f in lines})
    if kind == VERIFY_FAILED:
        title = f"{dag_id}: verify failed for run {pipeline_run_id}"
        if found:
            title += f": {remaining} of {found} defects remain after backfill"
    else:
        left = "all repaired" if remaining == 0 else f"{remaining} remain"
        title = f"{dag_id}: run {pipeline_run_id} found {found} defects ({left})"
    if rewound:
        title += f"; source rewound on {', '.join(r.topic for r in rewound)}"
    facts = (
        ("pipeline run", pipeline_run_id),
        ("Airflow run", run_id),
        ("status", str(status or "unknown")),
        ("defects found", str(found)),
        ("defects left", str(remaining)),
        ("consumer/topic pairs", str(topics)),
    )
    links = (
        ("Reconciliation page", page_link(base_url)),
        ("Findings", findings_link(base_url, pipeline_run_id)),
        ("Airflow run", run_link(base_url, dag_id, run_id)),
    )
    return Alert(
        kind, dag_id, run_id, title, facts, tuple(lines), (), error[-MAX_DETAIL:], links, rewound
    )


def lag_alert(
    dag_id: str, run_id: str, lags: Sequence[Lagging], reason: str, base_url: str
) -> Alert:
    """The sink sensor timed out: which consumers lag on which topics, by how many seqs."""
    consumers = sorted({lag.consumer for lag in lags})
    title = f"{dag_id}: sinks lag behind the service for run {run_id}"
    if lags:
        title += f": {', '.join(consumers)} ({max(lag.behind for lag in lags)} seqs behind)"
    facts = (
        ("Airflow run", run_id),
        ("lagging consumers", ", ".join(consumers) or "none measured"),
        ("seqs behind (total)", str(sum(lag.behind for lag in lags))),
    )
    links = (
        ("Reconciliation page (consumer lag)", page_link(base_url)),
        ("Airflow run", run_link(base_url, dag_id, run_id)),
    )
    return Alert(SINK_LAG, dag_id, run_id, title, facts, (), tuple(lags), reason, links)


def deadline_alert(
    dag_id: str, run_id: str, interval: tuple[str, str], deadline: str, base_url: str
) -> Alert:
    """A data interval was not verified by its deadline."""
    title = f"{dag_id}: data interval {interval[0]} – {interval[1]} not verified by {deadline}"
    facts = (
        ("Airflow run", run_id),
        ("data interval", f"{interval[0]} – {interval[1]}"),
        ("deadline", deadline),
    )
    links = (
        ("Airflow run", run_link(base_url, dag_id, run_id)),
        ("Reconciliation page", page_link(base_url)),
    )
    return Alert(DEADLINE_MISSED, dag_id, run_id, title, facts, links=links)


def subject(alert: Alert) -> str:
    return f"[auditsync] {alert.title}"


def text(alert: Alert) -> str:
    """The plain-text message (the webhook's body text)."""
    out = [subject(alert), *(f"{k}: {v}" for k, v in alert.facts)]
    for r in alert.rewinds:
        out.append(f"- {r.topic} source_rewound: seqs {format_spans(r.spans)}: {REWOUND_REASON}")
    for f in alert.findings[:MAX_ROWS]:
        line = f"- {f.consumer}/{f.topic} {f.status}: found {f.found}, left {f.remaining}"
        if f.spans:
            line += f", seqs {format_spans(f.spans)}"
        elif format_window(f.window):
            line += f", window {format_window(f.window)}"
        if f.examples:
            line += f", still defective {format_ranges(f.examples)}"
        out.append(line)
    for lag in alert.lags[:MAX_ROWS]:
        out.append(
            f"- {lag.consumer}/{lag.topic}: cursor {lag.cursor}, head {lag.head}, "
            f"{lag.behind} seqs behind"
        )
    hidden = max(0, len(alert.findings) - MAX_ROWS) + max(0, len(alert.lags) - MAX_ROWS)
    if hidden:
        out.append(f"… and {hidden} more on the Reconciliation page")
    if alert.detail:
        out.append(alert.detail)
    out.extend(f"{label}: {url}" for label, url in alert.links)
    return "\n".join(out)


def webhook_body(alert: Alert) -> dict[str, str]:
    """JSON body for a Slack or Microsoft Teams incoming webhook."""
    return {"text": text(alert)}


@functools.cache
def _environment() -> jinja2.Environment:
    """Built on the first e-mail, not when the DAG file imports this module."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def html(alert: Alert) -> str:
    """The e-mail body (every value autoescaped)."""
    return (
        _environment()
        .get_template("alert_email.html")
        .render(
            alert=alert,
            subject=subject(alert),
            findings=alert.findings[:MAX_ROWS],
            lags=alert.lags[:MAX_ROWS],
            hidden=max(0, len(alert.findings) - MAX_ROWS) + max(0, len(alert.lags) - MAX_ROWS),
            window=format_window,
            spans=format_spans,
            reason=REWOUND_REASON,
            seq_ranges=format_ranges,
        )
    )
