"""Where a consumer's segments sit inside its landing, and which folders a reader lists.

A segment's key, relative to ``<landing>/<consumer>/``, is
``<YYYY-MM-DD>/<HH>/part-<first:012d>-<last:012d>.parquet``: the UTC date and hour the sink
wrote it. The sink never writes into a folder earlier than its last one (a clock that steps
back keeps writing into the last folder), so folder order is frame order, and a reader that
knows the folder of the last segment it consumed lists only that folder and later ones: its
cost follows what is new, not the history. Root-level ``part-*.parquet`` keys are the layout
earlier sinks wrote; every reader still takes them (they precede every dated folder in frame
order) until retention deletes them.

Pure: a walk is given ``listdir`` (one folder's sub-folder names and ``(file name, modified
seconds)`` pairs, one delimiter listing on S3) and decides what to list next.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable

DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
HOUR_RE = re.compile(r"\d{2}")
SEGMENT_RE = re.compile(r"(?:(\d{4}-\d{2}-\d{2}/\d{2})/)?part-(\d{12})-(\d{12})\.parquet")
LEGACY = ""  # the folder of a root-level segment: before every dated folder

# One folder's listing: (sub-folder names, [(file name, modified seconds since the epoch)]).
Listing = tuple[list[str], list[tuple[str, float]]]
ListDir = Callable[[str], Listing]


@dataclasses.dataclass(frozen=True)
class SegmentKey:
    folder: str  # "YYYY-MM-DD/HH", or LEGACY
    first: int
    last: int
    modified: float = dataclasses.field(default=0.0, compare=False)

    @property
    def name(self) -> str:
        """The key relative to the consumer's landing."""
        return segment_key(self.folder, self.first, self.last)


def folder_of(when: dt.datetime) -> str:
    """The folder a segment written at ``when`` goes to (UTC date and hour)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d/%H")


def writing_folder(now: dt.datetime, last_folder: str) -> str:
    """Where the next segment goes: the current hour's folder, never one before the last."""
    return max(folder_of(now), last_folder)


def folder_start(folder: str) -> dt.datetime | None:
    """The start of a folder's hour; None for the legacy root."""
    if folder == LEGACY:
        return None
    return dt.datetime.strptime(folder, "%Y-%m-%d/%H").replace(tzinfo=dt.UTC)


def segment_key(folder: str, first: int, last: int) -> str:
    name = f"part-{first:012d}-{last:012d}.parquet"
    return f"{folder}/{name}" if folder else name


def parse_segment(name: str, modified: float = 0.0) -> SegmentKey | None:
    """A key relative to the consumer's landing, or None for anything that is not a segment."""
    m = SEGMENT_RE.fullmatch(name)
    if m is None:
        return None
    return SegmentKey(m.group(1) or LEGACY, int(m.group(2)), int(m.group(3)), modified)


def _days(folders: list[str]) -> list[str]:
    return sorted(f for f in folders if DAY_RE.fullmatch(f))


def _hours(folders: list[str]) -> list[str]:
    return sorted(f for f in folders if HOUR_RE.fullmatch(f))


def _segments(folder: str, files: list[tuple[str, float]]) -> list[SegmentKey]:
    found = []
    for name, modified in files:
        key = parse_segment(f"{folder}/{name}" if folder else name, modified)
        if key is not None:
            found.append(key)
    return found


def folders_since(listdir: ListDir, since: str = LEGACY) -> list[str]:
    """The dated folders at or after ``since``, in order (a listing of the root and of each
    day from ``since``'s)."""
    folders, _ = listdir("")
    since_day, _, since_hour = since.partition("/")
    found = []
    for day in _days(folders):
        if day < since_day:
            continue
        hours, _ = listdir(day)
        found += [f"{day}/{h}" for h in _hours(hours) if day > since_day or h >= since_hour]
    return found


def segments_since(listdir: ListDir, since: str = LEGACY) -> list[SegmentKey]:
    """Every root-level (legacy) segment, then the segments of the folders at or after
    ``since``, in frame order. Listings: the root, each day from ``since``'s, each hour from
    ``since``'s: one per folder that can hold a segment not yet consumed."""
    folders, files = listdir("")
    found = _segments(LEGACY, files)
    since_day, _, since_hour = since.partition("/")
    for day in _days(folders):
        if day < since_day:
            continue
        hours, _ = listdir(day)
        for hour in _hours(hours):
            if day == since_day and hour < since_hour:
                continue
            _, hour_files = listdir(f"{day}/{hour}")
            found += _segments(f"{day}/{hour}", hour_files)
    return sorted(found, key=lambda k: k.first)


def newest_segment(listdir: ListDir) -> SegmentKey | None:
    """The segment with the highest frames: of the newest dated folder that holds one
    (walked back from the newest, so an emptied folder costs one listing) and the root's."""
    folders, files = listdir("")
    found = _segments(LEGACY, files)
    for day in reversed(_days(folders)):
        hours, _ = listdir(day)
        for hour in reversed(_hours(hours)):
            _, hour_files = listdir(f"{day}/{hour}")
            dated = _segments(f"{day}/{hour}", hour_files)
            if dated:
                return max(found + dated, key=lambda k: k.first)
    return max(found, key=lambda k: k.first) if found else None


def segments_after(listdir: ListDir, frame_no: int) -> list[SegmentKey]:
    """The segments holding frames after ``frame_no``, in frame order: dated folders walked
    back from the newest until one holds a segment at or below ``frame_no`` (folder order is
    frame order, so every earlier folder is below it too), plus the root's."""
    folders, files = listdir("")
    found = [k for k in _segments(LEGACY, files) if k.last > frame_no]
    reached = False
    for day in reversed(_days(folders)):
        hours, _ = listdir(day)
        for hour in reversed(_hours(hours)):
            _, hour_files = listdir(f"{day}/{hour}")
            keys = _segments(f"{day}/{hour}", hour_files)
            found += [k for k in keys if k.last > frame_no]
            if any(k.last <= frame_no for k in keys):
                reached = True
                break
        if reached:
            break
    return sorted(found, key=lambda k: k.first)
