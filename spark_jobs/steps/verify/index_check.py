"""verify's check of the search index against the source (``index_plan`` says which seqs,
``watch_service.store.index_verify`` compares them in PostgreSQL): what it finds is repaired
with the writer the sink and backfill share (``store/search_index``'s one upsert, through
``index_verify.repair``), checked again, and reported in the step's figures, which the run's
alert carries. No JVM: both sides are PostgreSQL tables."""

from __future__ import annotations

import time

from spark_jobs.common import store
from spark_jobs.steps.verify.index_plan import Check, behind, plan, summary
from watch_service.store import index_runs, index_verify, runs

WAIT_S = 30.0  # how long verify waits for a sink's index to reach what the run compacted
POLL_S = 0.25


def _check(url: str, checks: list[Check]) -> list[index_verify.Defect]:
    with store.connect(url) as conn:
        return [
            d
            for c in checks
            for lo, hi in c.ranges
            for d in index_verify.check(conn, c.topic, lo, hi, c.filtered)
        ]


def _around(checks: list[Check], found: list[index_verify.Defect]) -> list[Check]:
    """The checks narrowed to the span of what they found, to check the repair."""
    spans: dict[str, tuple[int, int]] = {}
    for d in found:
        lo, hi = spans.get(d.topic, (d.seq, d.seq))
        spans[d.topic] = (min(lo, d.seq), max(hi, d.seq))
    return [
        Check(c.topic, ((spans[c.topic][0] - 1, spans[c.topic][1]),), c.filtered, 0)
        for c in checks
        if c.topic in spans
    ]


def compacted(pipeline_url: str, run_id: str) -> dict[str, int]:
    """consumer → the last frame compacted through this run (its ``compact`` figures)."""
    with store.connect(pipeline_url) as conn:
        row = runs.get_run(conn, run_id)
    through = (((row[3] if row else None) or {}).get("compact") or {}).get("through") or {}
    return {c: int(v[0]) for c, v in through.items()}


def caught_up(
    source_url: str, frames: dict[str, int], consumers: set[str], wait_s: float
) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """The index marks, once every indexing consumer's has reached its compacted frame or
    ``wait_s`` passed; with the consumers still behind then."""
    deadline = time.monotonic() + wait_s
    with store.connect(source_url) as conn:
        while True:
            marks = index_verify.marks(conn)
            lagging = behind(marks, frames, consumers)
            if not lagging or time.monotonic() >= deadline:
                return marks, lagging
            time.sleep(POLL_S)


def verify_index(
    source_url: str, pipeline_url: str, warehouse: str, run_id: str, wait_s: float = WAIT_S
) -> dict:
    """Check this run's windows and its slice of the verified history, repair, check again;
    returns the figures (``index_plan.summary``, with the ``seconds`` it took)."""
    started = time.monotonic()
    with store.connect(pipeline_url) as conn:
        windows = index_runs.run_windows(conn, run_id)
        scrubbed = index_runs.scrubs(conn, warehouse, {w.topic for w in windows})
    marks, lagging = caught_up(
        source_url, compacted(pipeline_url, run_id), {w.consumer for w in windows}, wait_s
    )
    checks = plan(windows, set(marks) - set(lagging), scrubbed)
    found = _check(source_url, checks)
    with store.connect(source_url) as conn:
        repaired = index_verify.repair(conn, found)
    left = _check(source_url, _around(checks, found)) if found else []
    with store.connect(pipeline_url) as conn:
        index_runs.set_scrubs(conn, warehouse, {c.topic: c.scrubbed_through for c in checks})
    figures = summary(
        checks,
        [(d.kind, d.topic, d.seq) for d in found],
        [(d.kind, d.topic, d.seq) for d in left],
        repaired,
        lagging,
    )
    return {**figures, "seconds": round(time.monotonic() - started, 3)}


def render(figures: dict) -> str:
    """The step's output lines."""
    if figures["found"]:
        head = (
            f"verify: search index: {figures['found']} documents wrong in {figures['checked']} "
            f"seqs checked (missing {figures['missing']}, stale {figures['stale']}, extra "
            f"{figures['extra']}); {figures['remaining']} left after repair"
        )
    else:
        head = f"verify: search index matches the source ({figures['checked']} seqs checked)"
    late = [
        f"verify: search index of {c} not checked: indexed through frame {a}, compacted {b}"
        for c, (a, b) in figures["behind"].items()
    ]
    return "\n".join([head, *late])
