"""What maintenance does to each warehouse table, decided without a JVM (pure); the
statements ``Warehouse.maintain`` runs.

Three Iceberg procedures per table, in this order:

1. ``rewrite_data_files``: a partition's small files become files of the target size (only
   where a partition has at least ``MIN_INPUT_FILES`` of them, so a tidy table costs nothing);
2. ``expire_snapshots``: snapshots committed before ``older_than`` go, the current one always
   stays (``retain_last => 1``). ``older_than`` is the retention cutoff, moved back to the
   oldest snapshot a pipeline run started within the retention still references (its "as run
   X left it" read must keep working) and, for the deliveries table, to the newest snapshot
   carrying compact's state (``auditsync.compact``): after a rewrite the current snapshot has
   no such summary, and compact would start again from batch zero if expiry removed it;
3. ``remove_orphan_files``: files under the table's location that no kept snapshot references
   (a crashed writer's leftovers), older than the cutoff, and never younger than a day (the
   procedure refuses less: a file that young may be a write still in flight).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping

DEFAULT_RETENTION_HOURS = 7 * 24
DEFAULT_TARGET_FILE_MB = 128
MIN_INPUT_FILES = 2
ORPHAN_MIN_AGE_MS = 24 * 3600 * 1000


@dataclasses.dataclass(frozen=True)
class Expiry:
    """Where a table's expiry stops, and why (``reason``: what held it back, or cutoff)."""

    older_than_ms: int
    reason: str


def cutoff_ms(now: dt.datetime, retention_hours: float) -> int:
    return int((now - dt.timedelta(hours=retention_hours)).timestamp() * 1000)


def expiry(
    cutoff: int,
    committed_ms: Mapping[int, int],
    referenced: Iterable[int],
    compact_snapshot: int | None = None,
) -> Expiry:
    """``older_than`` for one table: ``committed_ms`` maps the table's snapshot ids to their
    commit times, ``referenced`` the ids runs within the retention reference (those already
    gone are ignored), ``compact_snapshot`` the snapshot compact's state lives in."""
    older_than, reason = cutoff, "retention cutoff"
    kept = [(s, "a run's snapshot") for s in referenced]
    if compact_snapshot is not None:
        kept.append((compact_snapshot, "compact's state"))
    for snap, why in kept:
        at = committed_ms.get(snap)
        if at is not None and at < older_than:
            older_than, reason = at, f"{why} {snap}"
    return Expiry(older_than, reason)


def orphans_before(now_ms: int, cutoff: int) -> int:
    """``older_than`` of the orphan removal: the cutoff, at least a day ago."""
    return min(cutoff, now_ms - ORPHAN_MIN_AGE_MS)


def timestamp_sql(ms: int) -> str:
    """A Spark SQL TIMESTAMP literal of ``ms`` (the session's time zone is UTC)."""
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return f"TIMESTAMP '{when.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]}'"


def rewrite_sql(catalog: str, table: str, target_file_mb: int) -> str:
    options = {
        "min-input-files": str(MIN_INPUT_FILES),
        "target-file-size-bytes": str(target_file_mb * 1024 * 1024),
        # a partition's delete files are folded into the rewritten data files
        "delete-file-threshold": "1",
    }
    pairs = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
    return f"CALL {catalog}.system.rewrite_data_files(table => '{table}', options => map({pairs}))"


def expire_sql(catalog: str, table: str, older_than_ms: int) -> str:
    return (
        f"CALL {catalog}.system.expire_snapshots(table => '{table}', "
        f"older_than => {timestamp_sql(older_than_ms)}, retain_last => 1)"
    )


def orphans_sql(catalog: str, table: str, older_than_ms: int) -> str:
    return (
        f"CALL {catalog}.system.remove_orphan_files(table => '{table}', "
        f"older_than => {timestamp_sql(older_than_ms)})"
    )


def progress_line(table: str, figures: Mapping[str, object]) -> str:
    return (
        f"[maintenance] {table:<13} files {figures['files_before']} -> {figures['files_after']}"
        f"  snapshots expired {figures['snapshots_expired']}"
        f"  orphans removed {figures['orphans_removed']}  ({figures['seconds']:.1f} s;"
        f" kept from {figures['kept_from']})"
    )
