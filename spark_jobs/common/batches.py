"""compact's batches: which landing segments are compacted, committed with the output.

A batch is numbered 1, 2, 3, … Its data files live in the deliveries table under
``consumer=C/topic=T/b<N>-<name>.parquet``; its commit record ``_batches/bNNNNNNNN.json``
names the segments it consumed, the files it added and, per consumer, how far compaction has
got (``segment_through``: the last frame number of the last consumed segment;
``frame_no``/``frame_id``: the consumer's last compacted frame, which gives the next batch's
first frame its ``cursor_before``). The record is cumulative, so only the newest is read.

The commit protocol (crash-safe, re-runnable):

1. Spark writes the batch to ``_staging/bN`` (ignored by readers: ``_`` prefix).
2. ``_batches/bN.pending.json`` lists the files about to be moved.
3. The files are renamed into their partitions, then the commit record is written (the commit
   point), then the pending list and the staging folder are removed.

``recover`` runs before every batch: a pending list without a commit record means a crash in
step 3, so its moved files are deleted and the batch is redone from the same segments; with a
commit record it is only cleanup. Segments are therefore compacted exactly once.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path

from spark_jobs.common import storage

SEGMENT_RE = re.compile(r"part-(\d{12})-(\d{12})\.parquet")
RECORD_RE = re.compile(r"b(\d{8})\.json")


@dataclasses.dataclass(frozen=True)
class Segment:
    consumer_dir: str
    path: Path
    first: int
    last: int


def record_path(batches: Path, batch: int, pending: bool = False) -> Path:
    return batches / (f"b{batch:08d}.pending.json" if pending else f"b{batch:08d}.json")


def committed(batches: Path) -> list[int]:
    """Committed batch numbers, ascending."""
    if not batches.is_dir():
        return []
    return sorted(int(m.group(1)) for m in map(RECORD_RE.fullmatch, os.listdir(batches)) if m)


def latest(batches: Path) -> dict:
    """The newest commit record (cumulative state); an empty batch 0 when there is none."""
    numbers = committed(batches)
    if not numbers:
        return {"batch": 0, "consumers": {}, "files": [], "segments": {}}
    return storage.read_json(record_path(batches, numbers[-1]))


def recover(deliveries: Path, batches: Path) -> None:
    """Undo the moves of a batch whose commit did not happen; tidy a committed one."""
    if batches.is_dir():
        for name in sorted(os.listdir(batches)):
            if not name.endswith(".pending.json"):
                continue
            batch = int(name[1:9])
            if not record_path(batches, batch).exists():
                for rel in storage.read_json(batches / name, {}).get("files", []):
                    storage.remove(deliveries / rel)
            storage.remove(batches / name)
    storage.remove(deliveries / "_staging")


def new_segments(landing: Path, state: dict) -> list[Segment]:
    """Landing segments after each consumer's ``segment_through``, in frame order."""
    found: list[Segment] = []
    if not landing.is_dir():
        return found
    for consumer_dir in sorted(os.listdir(landing)):
        folder = landing / consumer_dir
        if not folder.is_dir():
            continue
        through = state["consumers"].get(consumer_dir, {}).get("segment_through", 0)
        for name in os.listdir(folder):
            m = SEGMENT_RE.fullmatch(name)
            if not m:
                continue
            first, last = int(m.group(1)), int(m.group(2))
            if last <= through:
                continue
            if first <= through:
                raise ValueError(
                    f"landing segment {folder / name} overlaps frames already "
                    f"compacted (through frame {through})"
                )
            found.append(Segment(consumer_dir, folder / name, first, last))
    return sorted(found, key=lambda s: (s.consumer_dir, s.first))


def commit(
    deliveries: Path,
    batches: Path,
    state: dict,
    run_id: str,
    staging: Path,
    segments: list[Segment],
    last_frames: dict[str, tuple[int, str | None]],
    hook: Callable[[str], None] | None = None,
) -> dict:
    """Move the staged files of batch ``state['batch'] + 1`` in and commit it (see above)."""
    batch = state["batch"] + 1
    moves = []
    for path in storage.data_files(staging):
        rel = path.relative_to(staging)
        moves.append((path, rel.parent / f"b{batch:08d}-{rel.name}"))
    storage.write_json(
        record_path(batches, batch, pending=True), {"files": [str(rel) for _, rel in moves]}
    )
    for n, (src, rel) in enumerate(moves):
        (deliveries / rel).parent.mkdir(parents=True, exist_ok=True)
        os.rename(src, deliveries / rel)
        if hook and n == 0:
            hook("compact.moving")
    consumers = {k: dict(v) for k, v in state["consumers"].items()}
    for seg in segments:
        entry = consumers.setdefault(seg.consumer_dir, {})
        entry["segment_through"] = max(entry.get("segment_through", 0), seg.last)
    for consumer, (frame_no, frame_id) in last_frames.items():
        entry = consumers.setdefault(consumer, {})
        entry.update(frame_no=frame_no, frame_id=frame_id)
    record = {
        "batch": batch,
        "run_id": run_id,
        "consumers": consumers,
        "files": [str(rel) for _, rel in moves],
        "segments": {s.consumer_dir + "/" + s.path.name: [s.first, s.last] for s in segments},
    }
    if hook:
        hook("compact.committing")
    storage.write_json(record_path(batches, batch), record)
    storage.remove(record_path(batches, batch, pending=True))
    storage.remove(staging)
    return record


def files_of(batches: Path, first: int, last: int) -> list[str]:
    """Data files (relative to the deliveries root) of committed batches first..last."""
    out: list[str] = []
    for batch in committed(batches):
        if first <= batch <= last:
            out += storage.read_json(record_path(batches, batch))["files"]
    return out
