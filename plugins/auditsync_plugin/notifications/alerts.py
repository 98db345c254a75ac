"""What an operations alert says, as pure functions: no socket, no database, no Airflow.

Four findings are worth waking someone for: a run found defects (even when backfill repaired
them all; the search index's included, ``steps.verify.index``) or found the source rewound
(``source_rewound``: the ranges its reconcile recorded in the run's figures), verify failed
(naming, when the signed audit log's check failed it, the topic and the first bad seq from
verify's figures), the sinks lag past the sensor's timeout, and a data interval was not
verified by its deadline. Each becomes one :class:`Alert` built
from facts the I/O shell (``notifiers.py``) read — the run tables in PostgreSQL, the sinks'
cursors, Airflow's context — and is rendered (``alerts_render.py``: a subject line, plain
text for the webhooks, HTML for e-mail) from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from spark_jobs.common.spans import merge as merge_spans
from spark_jobs.common.statuses import SOURCE_REWOUND, VERDICTS
from spark_jobs.findings import Filters

DEFECTS_FOUND = "defects_found"
VERIFY_FAILED = "verify_failed"
SINK_LAG = "sink_lag"
DEADLINE_MISSED = "deadline_missed"
KINDS = (DEFECTS_FOUND, VERIFY_FAILED, SINK_LAG, DEADLINE_MISSED)

MAX_DETAIL = 2000  # characters of an error message kept


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
class IndexDefect:
    """Search-index documents a run's index check found wrong (``missing``, ``stale`` or
    ``extra``) in one topic: the seq ranges (inclusive)."""

    topic: str
    kind: str
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
    index: tuple[IndexDefect, ...] = ()


def page_link(base_url: str, consumer: str = "", topic: str = "") -> str:
    """The Reconciliation page (the plugin's ``/auditsync/``), filtered to a consumer/topic."""
    query = urlencode({k: v for k, v in (("topic", topic), ("consumer", consumer)) if v})
    return f"{base_url.rstrip('/')}/auditsync/" + (f"?{query}" if query else "")


def findings_link(
    base_url: str, run_id: str, consumer: str = "", topic: str = "", status: str = ""
) -> str:
    """The run's findings view (the plugin's ``/auditsync/findings``), filtered as the view
    reads its filters (``spark_jobs.findings.Filters``)."""
    chosen = Filters(consumer, topic, status)
    query = urlencode({"run": run_id, **chosen.query()})
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


def log_failure(steps: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The fact a run's failed signed-audit-log check adds to its alert, from verify's figures
    (``steps.verify.log_failure``: topic, first bad seq or None, why), or None."""
    failed = ((steps or {}).get("verify") or {}).get("log_failure")
    if not failed:
        return None
    where = f"topic {failed.get('topic')}"
    if failed.get("seq") is not None:
        where += f", first bad seq {failed['seq']}"
    return where, str(failed.get("why") or "")


def index_defects(steps: Mapping[str, Any] | None) -> tuple[int, int, tuple[IndexDefect, ...]]:
    """(found, left after repair, ranges by topic and kind) of a run's search-index check,
    from its figures (``steps.verify.index``: ``spark_jobs.steps.verify.index_plan.summary``)."""
    index = ((steps or {}).get("verify") or {}).get("index") or {}
    ranges = tuple(
        IndexDefect(topic, kind, tuple((int(a), int(b)) for a, b in spans))
        for topic, kinds in sorted((index.get("ranges") or {}).items())
        for kind, spans in sorted(kinds.items())
    )
    return int(index.get("found") or 0), int(index.get("remaining") or 0), ranges


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
    index_found, index_left, index = index_defects(steps)
    if kind == DEFECTS_FOUND and found == 0 and not rewound and not index_found:
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
        title += f"; {VERDICTS[SOURCE_REWOUND].label} on {', '.join(r.topic for r in rewound)}"
    if index_found:
        left_index = "all repaired" if index_left == 0 else f"{index_left} remain"
        title += f"; search index: {index_found} documents wrong ({left_index})"
    log_failed = log_failure(steps)
    if log_failed is not None and kind == VERIFY_FAILED:
        title += f"; the signed audit log does not verify ({log_failed[0]})"
    facts: tuple[tuple[str, str], ...] = (
        ("pipeline run", pipeline_run_id),
        ("Airflow run", run_id),
        ("status", str(status or "unknown")),
        ("defects found", str(found)),
        ("defects left", str(remaining)),
        ("consumer/topic pairs", str(topics)),
    )
    if log_failed is not None:
        facts += (("signed audit log", f"{log_failed[0]}: {log_failed[1]}"),)
    links = (
        ("Reconciliation page", page_link(base_url)),
        ("Findings", findings_link(base_url, pipeline_run_id)),
        ("Airflow run", run_link(base_url, dag_id, run_id)),
    )
    return Alert(
        kind,
        dag_id,
        run_id,
        title,
        facts,
        tuple(lines),
        (),
        error[-MAX_DETAIL:],
        links,
        rewound,
        index,
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
