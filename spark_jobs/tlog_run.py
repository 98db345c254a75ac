"""The signed audit log in a pipeline run: verify's last act, after backfill's repair.

:func:`check_and_publish`, per topic the audit log holds:

1. **check**: the latest signed checkpoint on storage is opened with the operator's verifier
   key and its right edge authenticated; then a window of up to :data:`SWEEP` already-signed
   seqs is recomputed from the audit log and compared with the stored tiles
   (``tlog_verify.check_range``). The window starts where the previous run's stopped (its
   ``swept`` in ``pipeline_runs.checkpoints``) and wraps at the end, so every signed seq is
   re-checked at least once every ``size / SWEEP`` runs. A row edited, deleted, re-seq'd or
   rewritten, or a tile overwritten, fails the check naming the topic and the first bad seq.
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

from spark_jobs.layout import Layout
from spark_jobs.tlog_command import current_snapshot, publish, signer_of, verifier_of
from spark_jobs.tlog_store import TlogError, TopicLog
from spark_jobs.tlog_verify import VerifyFailure, check_range
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

    @property
    def ok(self) -> bool:
        return self.failure is None


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


def check_and_publish(
    layout: Layout,
    database_url: str,
    settings: Settings,
    previous: dict[str, dict[str, Any]],
    sweep: int = SWEEP,
) -> RunLog:
    """Check each topic's signed log against the audit log and grow it by the new leaves;
    ``previous`` is the last run's ``pipeline_runs.checkpoints`` (the sweep cursors)."""
    from spark_jobs import time_travel

    try:
        signer, verifier = _keys(settings)
    except TlogError as exc:
        return RunLog(f"{FAILED}: {exc}", {}, str(exc))
    if verifier is None:
        return RunLog(NO_KEY, {})
    try:
        table = time_travel.load(layout, database_url)
    except time_travel.TimeTravelError:  # no audit log yet: nothing to sign
        return RunLog(SIGNED if signer else NO_KEY, {})
    snapshot = current_snapshot(table, None)
    storage = Storage(layout.warehouse)
    out: dict[str, dict[str, Any]] = {}
    for topic in time_travel.topics(table, snapshot):
        log = TopicLog.at(storage, topic, verifier)
        try:
            found = log.latest()
            size = found[0].size if found else 0
            start, end = window(size, int(previous.get(topic, {}).get("swept", 0)), sweep)
            if found:
                check_range(log, log.hashes(found[0]), table, snapshot, start, end)
        except (VerifyFailure, TlogError) as exc:
            return RunLog(f"{FAILED}: {exc}", out, str(exc))
        out[topic] = {"old_size": size, "checked": [start, end], "swept": end}
    if signer is None:
        return RunLog(NO_KEY, out)
    for p in publish(
        layout.work,
        database_url,
        signer,
        run_id=layout.run_id,
        snapshot_id=snapshot,
        topics=list(out),
    ):
        out[p.topic].update(
            size=p.checkpoint.size,
            root=base64.b64encode(p.checkpoint.root).decode(),
            note=p.signed,
        )
    return RunLog(SIGNED, out)
