"""Recent reconciliation runs, per topic, for the plugin's page.

:func:`fetch` reads the pipeline's run tables through ``watch_service.store.runs`` (the runs'
summary rows and each consumer's progress); :func:`pivot` turns the (run, consumer, topic,
status, net count, remaining, rewound ranges) rows into one line per topic. ``report.py``
derives what the page shows and ``page.py`` renders it. Everything but :func:`fetch` is pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from spark_jobs.common import statuses as st


@dataclasses.dataclass
class TopicLine:
    run_id: str
    run_status: str
    finished_at: str
    consumer: str
    topic: str
    delivered: int = 0
    duplicates: int = 0
    tombstoned: int = 0
    silent_gaps: int = 0
    backfilled: int = 0
    defects_left: int = 0
    audit_snapshot: int | None = None  # the audit log's snapshot the run left (None: unchanged)
    rewound: int = 0  # seqs the source lost and wrote again (``source_rewound``)
    rewound_ranges: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    failed_step: str = ""  # the task or step that failed for good, and its one-line reason
    failure_reason: str = ""
    log_status: str = ""  # the signed audit log: signed | unsigned: why | failed: why
    checkpoint: Mapping[str, Any] | None = None  # this topic's: size, root (base64), note
    signature: str = ""  # whether its signed notes verify (``signatures.check``)
    # the sink's re-delivery ranges compact read this run: (seq_from, seq_to, verdict)
    redelivered: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)


def pivot(
    rows: Iterable[Mapping[str, Any]], repairable: tuple[str, ...], defects: tuple[str, ...]
) -> list[TopicLine]:
    """One line per (run, consumer, topic). A defect's ``remaining`` is what verify found
    left after backfill (None: verify has not run, so all of it is left); repairable defects
    found minus those left were backfilled. A run with no summary rows (it failed before
    reconcile committed, or is running) is one line with no consumer or topic."""
    lines: dict[tuple[str, str, str], TopicLine] = {}
    for row in rows:
        key = (row["run_id"], row.get("consumer") or "", row.get("topic") or "")
        line = lines.get(key)
        if line is None:
            finished = row.get("finished_at")
            line = lines[key] = TopicLine(
                row["run_id"],
                str(row.get("run_status") or ""),
                "" if finished is None else str(finished)[:19],
                key[1],
                key[2],
                audit_snapshot=row.get("audit_snapshot"),
                failed_step=str(row.get("failed_step") or ""),
                failure_reason=str(row.get("failure_reason") or ""),
                log_status=str(row.get("log_status") or ""),
                checkpoint=row.get("checkpoint"),
                redelivered=[
                    (int(x["seq_from"]), int(x["seq_to"]), str(x["verdict"]))
                    for x in row.get("redelivered") or ()
                    if (x.get("consumer"), x.get("topic")) == key[1:]
                ],
            )
        if row.get("status") is None:
            continue
        status, count = row["status"], int(row["count"])
        left = count if row.get("remaining") is None else int(row["remaining"])
        if status == st.DELIVERED:
            line.delivered += count
        elif status == st.DUPLICATE:
            line.duplicates += count
        elif status == st.TOMBSTONED:
            line.tombstoned += count
        elif status == st.SILENT_GAP:
            line.silent_gaps += count
        elif status == st.SOURCE_REWOUND:
            line.rewound += count
            line.rewound_ranges = [(int(a), int(b)) for a, b in row.get("rewound") or ()]
        if status in defects:
            line.defects_left += left
        if status in repairable:
            line.backfilled += count - left
    return list(lines.values())


def fetch(
    conninfo: Mapping[str, Any], limit: int = 60, source: Mapping[str, Any] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The newest ``limit`` runs' rows (``recent_runs``) and each consumer's progress
    (``consumer_progress``) from the pipeline's database, the heads from ``source``'s (None:
    the same database)."""
    import psycopg

    from watch_service.store import runs

    with psycopg.connect(**conninfo, connect_timeout=5, autocommit=True) as conn:
        if source is None or dict(source) == dict(conninfo):
            return runs.recent_runs(conn, limit), runs.consumer_progress(conn)
        with psycopg.connect(**source, connect_timeout=5, autocommit=True) as heads:
            return runs.recent_runs(conn, limit), runs.consumer_progress(conn, source=heads)
