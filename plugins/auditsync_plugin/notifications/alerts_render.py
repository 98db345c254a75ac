"""How an operations alert reads, as pure functions: seq ranges as text, and each
:class:`~.alerts.Alert` rendered three ways: a subject line, plain text (the
webhook's ``{"text": …}``, which Slack and Microsoft Teams incoming webhooks both accept) and
HTML for e-mail, through an autoescaping Jinja2 template (``templates/alert_email.html``).
What an alert says is built in ``alerts.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from spark_jobs.common.spans import merge as merge_spans
from spark_jobs.common.statuses import SOURCE_REWOUND, VERDICTS

if TYPE_CHECKING:
    from .alerts import Alert

MAX_ROWS = 20  # table rows an alert shows; the page has the rest
MAX_RANGES = 5  # seq ranges shown per row
REWOUND_REASON = (
    "the source lost these acknowledged seqs (a failover to a lagging replica or a restore) "
    "and writes them again: consumers may hold other content for them"
)
TEMPLATES = Path(__file__).resolve().parent / "templates"


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


def subject(alert: Alert) -> str:
    return f"[auditsync] {alert.title}"


def text(alert: Alert) -> str:
    """The plain-text message (the webhook's body text)."""
    out = [subject(alert), *(f"{k}: {v}" for k, v in alert.facts)]
    for r in alert.rewinds:
        out.append(f"- {r.topic} {SOURCE_REWOUND}: seqs {format_spans(r.spans)}: {REWOUND_REASON}")
    for d in alert.index:
        out.append(f"- {d.topic} search index {d.kind}: seqs {format_spans(d.spans)}")
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
            rewound=VERDICTS[SOURCE_REWOUND],
            seq_ranges=format_ranges,
        )
    )
