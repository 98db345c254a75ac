"""The Reconciliation page's HTML (pure): each topic's state at a glance, the chart over recent
runs, each consumer's lag, and the runs table, filtered by topic and consumer and paged.

Everything is server-rendered; the only style sheet is the plugin's own ``static/report.css``
(linked relatively, so the page works under any prefix and inside Airflow's iframe) and the
only picture is :mod:`chart`'s inline SVG. The table's columns wrap instead of widening the
page, so all of them stay visible in a narrow window.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from urllib.parse import urlencode

from spark_jobs.common import selection
from spark_jobs.common import statuses as st
from watch_service.protocol import redelivery

from ..notifications.alerts_render import format_spans
from . import chart, signatures
from .report import (
    TOPIC_VERDICTS,
    Filters,
    Lag,
    TopicState,
    choices,
    run_points,
    topic_states,
)
from .runs import TopicLine

REWOUND_COLOUR = st.VERDICTS[st.SOURCE_REWOUND].colour
DELIVERED_LABEL = st.VERDICTS[st.DELIVERED].label

# (attribute, heading) of the runs table's number columns; a line's text columns come first.
# A status's heading is its label in the verdict table (``statuses.VERDICTS``).
NUMBERS = (
    ("delivered", DELIVERED_LABEL),
    ("duplicates", f"{st.VERDICTS[st.DUPLICATE].label}s"),
    ("tombstoned", st.VERDICTS[st.TOMBSTONED].label),
    ("silent_gaps", f"{st.VERDICTS[st.SILENT_GAP].label}s found"),
    ("backfilled", "backfilled"),
    ("defects_left", "defects left"),
)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _badge(css: str, text: str) -> str:
    return f'<span class="badge v-{_e(css)}">{_e(text)}</span>'


def _options(name: str, label: str, values: list[str], chosen: str) -> str:
    opts = [f'<option value="">every {label}</option>']
    opts += [
        f'<option value="{_e(v)}"{" selected" if v == chosen else ""}>{_e(v)}</option>'
        for v in values
    ]
    return (
        f'<label>{label} <select name="{name}" id="filter-{name}">{"".join(opts)}</select></label>'
    )


def _filters(lines: Sequence[TopicLine], filters: Filters) -> str:
    topics, consumers = choices(lines)
    return (
        '<form id="filters" method="get" action="">'
        + _options("topic", "topic", topics, filters.topic)
        + _options("consumer", "consumer", consumers, filters.consumer)
        + '<button type="submit">show</button> <a href="?">clear</a></form>'
    )


def _none_yet(what: str) -> str:
    return f'<p class="muted">no {what} reconciled yet</p>'


def _grid(table_id: str, head: str, rows: Sequence[str]) -> str:
    """A ``grid`` table: ``head`` its heading cells, ``rows`` its ``<tr>`` rows."""
    body = "\n".join(rows)
    return (
        f'<table id="{table_id}" class="grid"><thead><tr>{head}</tr></thead>'
        f"<tbody>\n{body}\n</tbody></table>"
    )


def _rewound(line: TopicLine) -> str:
    """The seqs the source lost and wrote again, in the rewound colour (nothing when none)."""
    if not line.rewound:
        return ""
    spans = format_spans(line.rewound_ranges) or f"{line.rewound} seqs"
    rewound = st.VERDICTS[st.SOURCE_REWOUND]
    return f'<div class="{rewound.colour}">{rewound.label}: {_e(spans)}</div>'


def _card(s: TopicState) -> str:
    line = s.line
    return (
        f'<li class="card v-{_e(TOPIC_VERDICTS[s.verdict][1])}" data-verdict="{_e(s.verdict)}">'
        f'<div class="card-head"><b>{_e(s.topic)}</b> '
        f"{_badge(TOPIC_VERDICTS[s.verdict][1], TOPIC_VERDICTS[s.verdict][0])}"
        f'</div><div class="muted">{_e(s.consumer)} · {_e(line.finished_at or "unfinished")}'
        f"</div><div>{line.delivered} {DELIVERED_LABEL} · {line.backfilled} backfilled · "
        f"{line.defects_left} left</div>{_rewound(line)}</li>"
    )


def _glance(states: Sequence[TopicState]) -> str:
    if not states:
        return _none_yet("topic")
    return f'<ul id="topics" class="cards">{"".join(_card(s) for s in states)}</ul>'


def _num(value: int | None) -> str:
    return "–" if value is None else str(value)


LAG_HEADINGS = ("consumer / topic", "head", "sink at", "sink behind", "reconciled", "unreconciled")


def _lag_row(lag: Lag) -> str:
    behind = lag.sink_behind
    cls = ' class="warn"' if behind else ""
    return (
        f'<tr><td>{_e(lag.consumer)}<div class="muted">{_e(lag.topic)}</div></td>'
        f"<td>{_num(lag.head)}</td><td>{_num(lag.sink_cursor)}</td>"
        f"<td{cls}>{_num(behind)}</td><td>{lag.reconciled_through}</td>"
        f"<td>{_num(lag.unreconciled)}</td></tr>"
    )


def _lags(lags: Sequence[Lag]) -> str:
    if not lags:
        return _none_yet("consumer")
    head = "".join(f"<th>{h}</th>" for h in LAG_HEADINGS)
    return _grid("lags", head, [_lag_row(lag) for lag in lags])


def _count_cell(line: TopicLine, name: str) -> str:
    value = getattr(line, name)
    css = "bad" if name == "defects_left" and value > 0 else "n"
    return f'<td class="{css}">{value}</td>'


def _audit_link(line: TopicLine) -> str:
    """The run's audit-log snapshot, a link to the audit log as the run left it, and one to
    the run's findings (this line's consumer and topic)."""
    snapshot = "unchanged" if line.audit_snapshot is None else f"snapshot {line.audit_snapshot}"
    query = urlencode({"run": line.run_id, "topic": line.topic})
    found = urlencode({"run": line.run_id, "consumer": line.consumer, "topic": line.topic})
    return (
        f'<div class="muted">audit log: <a class="audit-log" href="audit-log?{_e(query)}">'
        f'{_e(snapshot)}</a> · <a class="findings" href="findings?{_e(found)}">findings</a></div>'
    )


def _redelivered(line: TopicLine) -> str:
    """The seqs the consumer's sink was sent again at or below its cursor, by verdict: seqs
    issued again with other content (a source restored with its sessions) in the rewound
    colour, plain duplicates muted (nothing when none)."""
    out = []
    for verdict in (redelivery.REISSUED, redelivery.DUPLICATE, redelivery.UNCHECKED):
        spans = [(a, b) for a, b, v in line.redelivered if v == verdict]
        if spans:
            css = REWOUND_COLOUR if verdict == redelivery.REISSUED else "muted"
            out.append(
                f'<div class="redelivered {css}">re-delivered, {verdict}: '
                f"{_e(format_spans(spans))}</div>"
            )
    return "".join(out)


def _failure(line: TopicLine) -> str:
    """Where and why a run failed for good (nothing for a run that did not)."""
    if not line.failed_step:
        return ""
    return (
        f'<div class="failure bad">failed in <b class="failed-step">{_e(line.failed_step)}</b>: '
        f'<span class="failure-reason">{_e(line.failure_reason)}</span></div>'
    )


def _checkpoint(line: TopicLine) -> str:
    """The topic's signed checkpoint this run recorded: size, root, signature status and
    whether its signed notes verify with the log key; red when the run's check of the signed
    log failed or a note does not verify (nothing before the first signed run)."""
    if not line.log_status:
        return ""
    word = line.log_status.split(":", 1)[0]
    broken = line.signature.startswith(signatures.FAILS)
    css = "bad" if word == "failed" or broken else "muted"
    cp = line.checkpoint or {}
    shown = f"size {cp['size']}, root {cp['root']}" if "size" in cp else "no checkpoint"
    checked = f' · <span class="verified">{_e(line.signature)}</span>' if line.signature else ""
    return (
        f'<div class="checkpoint {css}" title="{_e(line.log_status)}">checkpoint: '
        f'{_e(shown)} · <span class="signature">{_e(word)}</span>{checked}</div>{_fork(line)}'
    )


def _fork(line: TopicLine) -> str:
    """The break a rewound source made in the topic's signed log, as the run recorded it:
    where, why, and the old and new checkpoints (nothing when the run forked nothing)."""
    fork = signatures.fork_of(line.checkpoint)
    if fork is None:
        return ""
    spans = format_spans(list(fork.spans)) or "-"
    return (
        f'<div class="fork rewound">the signed log forks at seq {fork.seq} '
        f"({_e(fork.reason)}: {_e(spans)}): old checkpoint {_e(fork.old)} → new checkpoint "
        f"{_e(fork.new)}; seqs 1..{fork.seq - 1} prove into both</div>"
    )


def _runs_table(page: selection.Page[TopicLine]) -> str:
    head = "<th>run</th><th>status</th><th>consumer / topic</th>" + "".join(
        f'<th class="n">{_e(label)}</th>' for _, label in NUMBERS
    )
    body = []
    for line in page.lines:
        status = _badge(line.run_status or "running", line.run_status or "running")
        cells = "".join(_count_cell(line, name) for name, _ in NUMBERS)
        body.append(
            f"<tr><td>{_e(line.run_id)}{_audit_link(line)}</td>"
            f'<td>{status}<div class="muted">{_e(line.finished_at)}</div>{_rewound(line)}'
            f"{_failure(line)}{_checkpoint(line)}{_redelivered(line)}</td>"
            f'<td>{_e(line.consumer)}<div class="muted">{_e(line.topic)}</div></td>'
            f"{cells}</tr>"
        )
    if not body:
        body.append(f'<tr><td colspan="{3 + len(NUMBERS)}">no reconciliation runs yet</td></tr>')
    return _grid("runs", head, body)


def _pager(page: selection.Page[TopicLine], filters: Filters) -> str:
    def link(number: int, text: str) -> str:
        query = {**filters.query(), "page": str(number)}
        return f'<a href="?{_e(urlencode(query))}" rel="nofollow">{text}</a>'

    prev = link(page.number - 1, "← newer") if page.number > 1 else ""
    nxt = link(page.number + 1, "older →") if page.number < page.pages else ""
    return (
        f'<nav id="pager">{prev} <span>page {page.number} of {page.pages} '
        f"({page.total} lines)</span> {nxt}</nav>"
    )


def render_page(
    lines: list[TopicLine],
    docs_available: bool,
    error: str | None = None,
    filters: Filters | None = None,
    lags: Sequence[Lag] = (),
) -> str:
    """The whole page; ``lines`` newest run first, unfiltered (the filters choose from them)."""
    filters = filters or Filters()
    kept = selection.select(lines, filters)
    page = selection.paginate(kept, filters.page, selection.RUNS_PAGE)
    docs = (
        '<a id="data-docs" href="docs/index.html">Great Expectations Data Docs</a>'
        if docs_available
        else '<span class="muted">no Data Docs yet: no checkpoint has run</span>'
    )
    problem = f'<p class="bad" id="error">{_e(error)}</p>' if error else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>auditsync reconciliation</title>
<link rel="stylesheet" href="static/report.css"></head>
<body>
<header><h1>auditsync reconciliation</h1><p>{docs}</p></header>
{problem}
{_filters(lines, filters)}
<section><h2>Topics, newest run</h2>{_glance(topic_states(kept))}</section>
<div class="pair">
<section id="trend"><h2>Recent runs</h2>{chart.render(run_points(kept))}</section>
<section><h2>Consumer lag</h2>{_lags(selection.select(lags, filters))}</section>
</div>
<section><h2>Runs by topic</h2>{_runs_table(page)}{_pager(page, filters)}</section>
</body></html>
"""
