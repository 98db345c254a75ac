"""Landing retention, decided (pure): which segments go and which folders are listed.

A segment goes once it has been compacted, reconciled and verified by a passed run and is
older than the retention:

- **verified**: its last frame is at or below the newest frame a passed run's compact took for
  its consumer (``through`` in that run's ``pipeline_runs.steps.compact``), and no run on
  record that did not pass (failed, or still running) compacted any of its frames
  (``consumed``): the evidence of a run that did not pass stays with it;
- **older**: its folder's hour ended before ``now - retention`` (the sink writes a segment into
  the folder of the hour it is written in, or a later one if the clock stepped back, so that
  hour never ends after the write). A root-level segment an earlier sink wrote has no folder:
  its object's modification time is its age.

A segment not yet compacted is above every ``through``, so it stays; ``pipeline audit``
re-judges what ``deliveries`` holds and reads the landing only for what is not yet compacted,
so it needs nothing retention deletes.

Listing follows what expires: a day or hour folder is listed only if its hour has ended
before the cutoff and it is not after the consumer's verified folder. A folder whose every
segment goes, and that is before the verified folder (which the sink never writes into
again), goes whole (one batched delete on S3).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping

from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.landing_keys import LEGACY, SegmentKey, folder_start

DEFAULT_HOURS = 7 * 24
SETTING = "AUDITSYNC_LANDING_RETENTION_HOURS"
PASSED = "passed"
HOUR = dt.timedelta(hours=1)


class RetentionSettingError(AuditsyncError):
    """``AUDITSYNC_LANDING_RETENTION_HOURS`` is not a number of hours >= 0."""


def retention_hours(raw: str | None) -> float:
    """The setting's value: a number of hours >= 0; default 168 (7 days)."""
    if raw is None or not raw.strip():
        return float(DEFAULT_HOURS)
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise RetentionSettingError(
            f"{SETTING}={raw!r}: expected a number of hours >= 0 (default {DEFAULT_HOURS})"
        )
    return value


@dataclasses.dataclass(frozen=True)
class Verified:
    """One consumer's verified position: every segment at or below ``frame`` (in ``folder``
    or before it) was compacted by a passed run or before one, except ``held`` frame ranges,
    compacted by runs on record that did not pass."""

    frame: int
    folder: str
    held: tuple[tuple[int, int], ...] = ()


def verified(runs: Iterable[tuple[str, Mapping | None]]) -> dict[str, Verified]:
    """Per consumer, from ``(status, steps.compact)`` of the runs on record (pure)."""
    best: dict[str, tuple[int, str]] = {}
    held: dict[str, list[tuple[int, int]]] = {}
    for status, compact in runs:
        if not compact:
            continue
        if status == PASSED:
            for consumer, (frame, folder) in (compact.get("through") or {}).items():
                if (frame, folder) > best.get(consumer, (0, LEGACY)):
                    best[consumer] = (int(frame), str(folder))
        else:
            for consumer, (first, last) in (compact.get("consumed") or {}).items():
                held.setdefault(consumer, []).append((int(first), int(last)))
    return {
        c: Verified(frame, folder, tuple(sorted(held.get(c, []))))
        for c, (frame, folder) in best.items()
    }


def hour_ended_before(folder: str, cutoff: dt.datetime) -> bool:
    start = folder_start(folder)
    return start is not None and start + HOUR <= cutoff


def day_may_expire(day: str, mark: Verified, cutoff: dt.datetime) -> bool:
    """List this day's hours? Only if its first hour ended before the cutoff and the day is
    not after the verified folder's."""
    return day <= mark.folder.partition("/")[0] and hour_ended_before(f"{day}/00", cutoff)


def hour_may_expire(folder: str, mark: Verified, cutoff: dt.datetime) -> bool:
    return folder <= mark.folder and hour_ended_before(folder, cutoff)


def expired(key: SegmentKey, mark: Verified, cutoff: dt.datetime) -> bool:
    """Whether this segment goes (see the module's rule)."""
    if key.last > mark.frame or any(key.first <= b and a <= key.last for a, b in mark.held):
        return False
    if key.folder == LEGACY:
        return key.modified <= cutoff.timestamp()
    return hour_ended_before(key.folder, cutoff)


@dataclasses.dataclass(frozen=True)
class FolderPlan:
    folder: str
    delete: tuple[str, ...]  # segment keys relative to the consumer's landing
    keep: tuple[str, ...]
    whole: bool  # every file goes and the sink never writes here again: delete the folder


def plan_folder(
    folder: str, keys: list[SegmentKey], others: int, mark: Verified, cutoff: dt.datetime
) -> FolderPlan:
    """One folder's segments split; ``others``: files in it that are not segments (kept, and
    they keep the folder)."""
    delete = tuple(k.name for k in keys if expired(k, mark, cutoff))
    keep = tuple(k.name for k in keys if not expired(k, mark, cutoff))
    whole = folder != LEGACY and not keep and not others and folder < mark.folder
    return FolderPlan(folder, delete, keep, whole)
