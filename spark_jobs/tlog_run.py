"""The signed audit log in a pipeline run: verify's last act, after backfill's repair.

:func:`check_and_publish`, per topic the audit log holds:

1. **check**: the latest signed checkpoint on storage is opened with the operator's verifier
   key and its right edge authenticated; then a window of up to :data:`SWEEP` already-signed
   seqs is recomputed from the audit log and compared with the stored tiles
   (``tlog_verify.check_range``). The window starts where the previous run's stopped (its
   ``swept`` in ``pipeline_runs.checkpoints``) and wraps at the end, so every signed seq is
   re-checked at least once every ``size / SWEEP`` runs. A row edited, deleted, re-seq'd or
   rewritten, or a tile overwritten, fails the check naming the topic and the first bad seq.
   Where this run's reconcile found the source rewound (``source_rewound`` ranges) and the
   audit log now differs from a signed seq inside them, the log forks there first
   (``spark_jobs.tlog_fork``): the break (topic, seq, ranges, reason, both checkpoints) is
   written beside the new log and recorded as the topic's ``fork``. The comparison is always
   with the checkpoint on storage, so a database restored to an earlier state changes nothing.
2. **grow**: when the check passed and a signing key is configured, the seqs after the last
   checkpoint become leaves (``tlog_command.publish``), new tiles are written and the new
   checkpoint is signed (also kept as ``runs/<run_id>``).

Keys: ``AUDITSYNC_LOG_SIGNING_KEY`` or ``AUDITSYNC_LOG_SIGNING_KEY_FILE`` (the DAG fills the
first from the Airflow connection ``auditsync_log_key``'s password when it exists). None is
ever generated: with no signing key the run says so once, checks what it can (with
``AUDITSYNC_LOG_VERIFIER_KEY``) and records ``unsigned``; the quality gate is not failed for
it, since the audit log itself is complete. A failed check fails the run's gate.

Cost per run and topic: two small reads (checkpoint, right edge), the tiles and rows of the
new leaves, and at most :data:`SWEEP` re-checked rows: it follows the new leaves, not the
history.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from spark_jobs import tlog_fork
from spark_jobs.tlog_command import (
    current_snapshot,
    leaves_after,
    publish,
    signer_of,
    verifier_of,
)
from spark_jobs.tlog_store import TlogError, TopicLog
from spark_jobs.tlog_verify import VerifyFailure, check_range
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.tlog import note
from watch_service.settings import Settings
from watch_service.storage import Storage

SWEEP = 8192  # signed seqs re-checked per topic per run (≈ 0.2 s of leaf hashing)
SIGNED, UNSIGNED, FAILED = "signed", "unsigned", "failed"
NO_KEY = (
    "unsigned: no signing key (set AUDITSYNC_LOG_SIGNING_KEY or AUDITSYNC_LOG_SIGNING_KEY_FILE, "
    "or the Airflow connection auditsync_log_key)"
)


@dataclasses.dataclass
class RunLog:
    status: str  # signed | unsigned: why | failed: topic seq why
    checkpoints: dict[str, dict[str, Any]]
    failure: str | None = None  # "<topic>: seq N differs …" or a stored-log problem
    topic: str | None = None  # the topic that failed, and its first bad seq (when one is)
    seq: int | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def failed_at(self) -> dict[str, Any] | None:
        """The failure as verify's figures record it (the alert reads it from there)."""
        if self.failure is None:
            return None
        return {"topic": self.topic, "seq": self.seq, "why": self.failure}


def window(size: int, swept: int, sweep: int = SWEEP) -> tuple[int, int]:
    """The signed seqs ``(start, end]`` to re-check: from ``swept`` (0 when past the end) for
    ``sweep`` seqs, never past ``size`` (pure)."""
    start = swept if 0 <= swept < size else 0
    return start, min(size, start + sweep)


def _keys(settings: Settings) -> tuple[note.Signer | None, note.Verifier | None]:
    if settings.log_signing_key is None and settings.log_signing_key_file is None:
        if settings.log_verifier_key is None:
            return None, None
        return None, verifier_of(settings)
    signer = signer_of(settings)
    return signer, signer.verifier


def rewound_change(
    log: TopicLog,
    checkpoint: note.Checkpoint,
    table: Any,
    snapshot: int | None,
    spans: list[tuple[int, int]],
) -> int | None:
    """The first signed seq inside ``spans`` (a rewound source's ranges) that the audit log
    now holds otherwise, or None; raises :class:`VerifyFailure` when the first difference in
    their bounds is outside them (that is no rewind). Its cost follows the ranges."""
    size = checkpoint.size
    inside = [(a, min(b, size)) for a, b in spans if a <= size]
    if not inside:
        return None
    lo, hi = min(a for a, _ in inside), max(b for _, b in inside)
    try:
        check_range(log, log.hashes(checkpoint), table, snapshot, lo - 1, hi)
    except VerifyFailure as exc:
        if any(a <= exc.seq <= b for a, b in inside):
            return exc.seq
        raise
    return None


def _fork(
    log: TopicLog,
    signer: note.Signer | None,
    seq: int,
    spans: list[tuple[int, int]],
    database_url: str,
    table: Any,
    snapshot: int | None,
    run_id: str,
) -> tuple[TopicLog, dict[str, Any]]:
    """Fork ``log`` at ``seq`` (``tlog_fork``); without a signing key it cannot be signed."""
    import psycopg

    if signer is None:
        raise TlogError(
            f"{log.topic}: the source was rewound at seq {seq}, which a signed checkpoint "
            f"covers: forking the log needs the signing key"
        )
    with psycopg.connect(database_url, autocommit=True) as conn:
        leaves = leaves_after(conn, table, snapshot, log.topic, seq - 1)
        new, b = tlog_fork.fork(log, signer, seq, leaves, spans, run_id)
    return new, b.record()


def check_and_publish(
    layout: Layout,
    database_url: str,
    settings: Settings,
    previous: dict[str, dict[str, Any]],
    sweep: int = SWEEP,
    rewound: dict[str, list[tuple[int, int]]] | None = None,
    pipeline_url: str | None = None,
) -> RunLog:
    """Check each topic's signed log against the audit log and grow it by the new leaves;
    ``previous`` is the last run's ``pipeline_runs.checkpoints`` (the sweep cursors),
    ``rewound`` this run's ``source_rewound`` ranges per topic: where the audit log changed
    a signed seq inside them, the log forks there (recorded as the topic's ``fork``).
    ``database_url`` is the source's (its gaps), ``pipeline_url`` the catalog's (default: the
    same)."""
    from spark_jobs import time_travel

    try:
        signer, verifier = _keys(settings)
    except TlogError as exc:
        return RunLog(f"{FAILED}: {exc}", {}, str(exc))
    if verifier is None:
        return RunLog(NO_KEY, {})
    try:
        table = time_travel.load(layout, pipeline_url or database_url)
    except time_travel.TimeTravelError:  # no audit log yet: nothing to sign
        return RunLog(SIGNED if signer else NO_KEY, {})
    snapshot = current_snapshot(table, None)
    storage = Storage(layout.warehouse)
    out: dict[str, dict[str, Any]] = {}
    for topic in time_travel.topics(table, snapshot):
        log = TopicLog.at(storage, topic, verifier)
        broke: dict[str, Any] = {}
        try:
            found = log.latest()
            size = found[0].size if found else 0
            spans = [(int(a), int(b)) for a, b in (rewound or {}).get(topic, [])]
            changed = rewound_change(log, found[0], table, snapshot, spans) if found else None
            if changed is not None:
                log, broke = _fork(
                    log, signer, changed, spans, database_url, table, snapshot, layout.run_id
                )
                found = log.latest()
            start, end = window(size, int(previous.get(topic, {}).get("swept", 0)), sweep)
            if found:
                end = min(end, found[0].size)
                check_range(log, log.hashes(found[0]), table, snapshot, start, end)
        except (VerifyFailure, TlogError) as exc:
            seq = exc.seq if isinstance(exc, VerifyFailure) else None
            return RunLog(f"{FAILED}: {exc}", out, str(exc), topic, seq)
        out[topic] = {"old_size": size, "checked": [start, end], "swept": end}
        if broke:
            out[topic]["fork"] = broke
    if signer is None:
        return RunLog(NO_KEY, out)
    for p in publish(
        layout.work,
        database_url,
        signer,
        run_id=layout.run_id,
        snapshot_id=snapshot,
        topics=list(out),
        pipeline_url=pipeline_url,
    ):
        out[p.topic].update(
            size=p.checkpoint.size,
            root=base64.b64encode(p.checkpoint.root).decode(),
            note=p.signed,
        )
    return RunLog(SIGNED, out)
