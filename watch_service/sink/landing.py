"""A consumer's landing ``<landing>/<consumer>/`` (a local folder or an ``s3://`` prefix):
append-only Parquet segments, the resume state, the fault decisions, and the lock that keeps
two sinks off one consumer (``lock.py``). Every byte goes through
:class:`~watch_service.storage.Storage`, whose writes are whole objects: on a local disk a temp
file, fsync, rename and folder fsync; on object storage one PUT. Nothing is ever appended to,
so both storages follow one protocol:

1. fault decisions new in the buffered frames are written as one object
   ``faults/part-<first:012d>-<last:012d>.jsonl`` (if a crash before step 2 left one of that
   name, the new one holds the union of both); all are loaded at start;
2. the segment ``<YYYY-MM-DD>/<HH>/part-<first:012d>-<last:012d>.parquet`` is written, whole,
   into the folder of the current UTC hour, or the last folder written if the clock stepped
   back (``protocol/landing_keys``: folder order is frame order); its footer metadata
   carries the resume position after its last frame (frame id, frame_no, cursor map) and the
   frame id in force just before its first frame (``before_frame_id``: a new session's start,
   or the previous frame's id). compact takes a consumer's start from its first segment's
   ``before_frame_id``, so a record lost from the very first frame is still in scope; and the
   re-delivery ranges among its rows (``redelivered``, ``protocol/redelivery``), the evidence
   that tells a restored source from a plain at-least-once duplicate;
3. only then is ``state.json`` (wid, last id, frame_no, cursors, index progress) replaced,
   whole.

A crash between 1 and 2 leaves decisions for frames that are re-delivered: they meet the same
fate. A crash between 2 and 3 is repaired on load: the newest segment's footer is ahead of
``state.json`` and wins, so frame numbers never repeat and nothing it holds is re-requested.
A crash inside a write leaves the old object (or none): a local temp file, removed at open.

Start costs what the newest folder holds, not the history: ``load_state`` lists the root, the
newest day and the newest hour (``landing_keys.newest_segment``). Root-level segments an
earlier sink wrote are still read until retention deletes them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Sequence

import orjson
import pyarrow as pa

from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.landing import (
    COLUMNS,
    FOOTER_BEFORE,
    FOOTER_KEY,
    NOT_NULL,
    STATE_FILE,
)
from watch_service.protocol.landing import footer as landing_footer
from watch_service.protocol.landing_keys import (
    folders_since,
    newest_segment,
    segments_after,
    segments_since,
    writing_folder,
)
from watch_service.protocol.landing_keys import segment_key as dated_key
from watch_service.protocol.redelivery import FOOTER_REDELIVERED, Redelivery
from watch_service.sink import lock
from watch_service.sink.faults import KINDS, FaultKey
from watch_service.sink.rows import INDEX_COLUMNS, index_ops
from watch_service.storage import Storage
from watch_service.store.search_index import IndexOp

FAULTS_DIR = "faults"
_FAULTS_RE = re.compile(r"part-(\d{12})-(\d{12})\.jsonl")
_TYPES = {"string": pa.string(), "int64": pa.int64()}
SCHEMA = pa.schema(
    [pa.field(name, _TYPES[kind], nullable=name not in NOT_NULL) for name, kind in COLUMNS]
)


class LandingError(AuditsyncError):
    """The consumer's landing is unusable (locked by another sink, unreadable state)."""


@dataclasses.dataclass
class SinkState:
    """Where a consumer stands; what ``state.json`` holds."""

    wid: str | None = None
    topics: list[str] = dataclasses.field(default_factory=list)
    node: str | None = None
    last_id: str = ""
    frame_no: int = 0
    cursors: dict[str, int] = dataclasses.field(default_factory=dict)
    indexed_frame_no: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self), option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes) -> SinkState:
        value = orjson.loads(raw)
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in value.items() if k in fields})


@dataclasses.dataclass(frozen=True)
class Segment:
    first_frame_no: int
    last_frame_no: int
    name: str  # relative to the consumer's landing

    @property
    def folder(self) -> str:
        """``YYYY-MM-DD/HH``, or "" for a root-level segment."""
        return self.name.rpartition("/")[0]


def segment_name(first_frame_no: int, last_frame_no: int, folder: str = "") -> str:
    """A segment's key in its consumer's landing: in ``folder`` (``YYYY-MM-DD/HH``), or at the
    root (the layout earlier sinks wrote)."""
    return dated_key(folder, first_frame_no, last_frame_no)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def faults_name(first_frame_no: int, last_frame_no: int) -> str:
    """The fault decisions written just before the segment of these frames."""
    return f"{FAULTS_DIR}/part-{first_frame_no:012d}-{last_frame_no:012d}.jsonl"


def faults_bytes(keys: set[FaultKey]) -> bytes:
    return b"".join(
        orjson.dumps({"kind": kind, "topic": topic, "seq": seq}) + b"\n"
        for kind, topic, seq in sorted(keys)
    )


def parse_faults(raw: bytes) -> set[FaultKey]:
    keys: set[FaultKey] = set()
    for line in raw.splitlines():
        if line.strip():
            entry = orjson.loads(line)
            if entry.get("kind") in KINDS:
                keys.add((entry["kind"], entry["topic"], entry["seq"]))
    return keys


def rows_table(rows: list[tuple]) -> pa.Table:
    columns = list(zip(*rows)) if rows else [()] * len(COLUMNS)
    return pa.Table.from_arrays(
        [pa.array(col, type=field.type) for col, field in zip(columns, SCHEMA)], schema=SCHEMA
    )


class Landing:
    """``root``: the landing zone; ``database_url``: where an object-store consumer is locked;
    ``clock``: what names a new segment's folder (UTC now)."""

    def __init__(
        self,
        root: Storage,
        consumer: str,
        database_url: str | None = None,
        clock: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self.consumer = consumer
        self.store = root.child(consumer)
        self._database_url = database_url
        self._lock: lock.ConsumerLock | None = None
        self._clock = clock
        self._folder: str | None = None  # the folder of the newest segment, once known

    @property
    def uri(self) -> str:
        return self.store.uri()

    def open(self) -> None:
        """Check the location answers, take the lock, and clear temp files a crash left."""
        self.store.ensure()
        try:
            self._lock = lock.take(self.store, self._database_url)
        except lock.LockError as exc:
            raise LandingError(str(exc)) from None
        self.store.remove_temp_files()
        # A crash mid-write leaves its temp file in the folder it wrote to: the newest one,
        # or a later one it was starting.
        newest = self.newest()
        if self.store.location.is_local:
            for folder in folders_since(self.store.listing, newest.folder if newest else ""):
                self.store.remove_temp_files(folder)
        # pyarrow imports pandas on its first array, which can take seconds: pay that here,
        # not inside the first flush while frames queue up.
        rows_table([])

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def segments(self) -> list[Segment]:
        """Every segment, in frame order (a walk of all folders: for tools and tests)."""
        return [Segment(k.first, k.last, k.name) for k in segments_since(self.store.listing)]

    def segments_after(self, frame_no: int) -> list[Segment]:
        """The segments holding frames after ``frame_no``: listings of the folders written
        since, not of the history."""
        return [
            Segment(k.first, k.last, k.name) for k in segments_after(self.store.listing, frame_no)
        ]

    def newest(self) -> Segment | None:
        """The segment with the highest frames; three listings, whatever the history."""
        key = newest_segment(self.store.listing)
        self._folder = "" if key is None else key.folder
        return None if key is None else Segment(key.first, key.last, key.name)

    def load_state(self) -> SinkState:
        """``state.json``, advanced to the newest segment's footer if that is ahead of it."""
        raw = self.store.read_bytes(STATE_FILE)
        try:
            state = SinkState() if raw is None else SinkState.from_json(raw)
        except (ValueError, TypeError) as exc:
            raise LandingError(f"{self.uri}/{STATE_FILE}: unreadable sink state ({exc})") from None
        newest = self.newest()
        if newest is not None and newest.last_frame_no > state.frame_no:
            footer = self.segment_footer(newest.name)
            state.frame_no = footer["last_frame_no"]
            state.last_id = footer["last_frame_id"]
            # The spool's whole map when it wrote that segment: newer than state.json's, and
            # lower only where a rewound frame moved a cursor back.
            state.cursors = dict(footer["cursors"])
        return state

    def save_state(self, state: SinkState) -> None:
        self.save_state_bytes(state.to_json())

    def save_state_bytes(self, payload: bytes) -> None:
        """Replace ``state.json`` with an already serialised state (built on the event loop,
        written from a worker thread)."""
        self.store.write_bytes(STATE_FILE, payload)

    def write_segment(
        self,
        rows: list[tuple],
        first_frame_no: int,
        last_frame_no: int,
        last_frame_id: str,
        cursors: dict[str, int],
        before_frame_id: str | None = None,
        redelivered: Sequence[Redelivery] = (),
    ) -> str:
        """Write one segment, whole; its name. Refused unless this sink still holds the lock.
        ``redelivered``: the re-delivery ranges among its rows, kept in its footer."""
        footer: dict[str, object] = {
            "first_frame_no": first_frame_no,
            "last_frame_no": last_frame_no,
            "last_frame_id": last_frame_id,
            "cursors": cursors,
        }
        if before_frame_id is not None:
            footer[FOOTER_BEFORE] = before_frame_id
        if redelivered:
            footer[FOOTER_REDELIVERED] = [r.as_dict() for r in redelivered]
        table = rows_table(rows).replace_schema_metadata({FOOTER_KEY: orjson.dumps(footer)})
        if self._folder is None:
            self.newest()
        folder = writing_folder(self._clock(), self._folder or "")
        name = segment_name(first_frame_no, last_frame_no, folder)
        self._check_lock()
        if self.store.exists(name):
            raise LandingError(
                f"{self.uri}/{name}: segment exists; frame numbers must never repeat"
            )
        self.store.write_parquet(name, table)
        self._folder = folder
        return name

    def _check_lock(self) -> None:
        if self._lock is None:
            raise LandingError(f"{self.uri}: not open (the consumer lock is not held)")
        try:
            self._lock.check()
        except lock.LockError as exc:
            raise LandingError(str(exc)) from None

    def segment_footer(self, name: str) -> dict:
        found = landing_footer(self.store.parquet_schema(name).metadata)
        if found is None:
            raise LandingError(f"{self.uri}/{name}: segment has no sink footer")
        return found

    def segment_index_ops(self, name: str) -> list[IndexOp]:
        """What the search index does for a segment's rows (``rows.index_ops``)."""
        cols = self.store.read_parquet(name, columns=list(INDEX_COLUMNS)).to_pydict()
        return index_ops(zip(*(cols[c] for c in INDEX_COLUMNS), strict=True))

    def load_faults(self) -> set[FaultKey]:
        """Every fault decision on record, deduplicated by (kind, topic, seq)."""
        keys: set[FaultKey] = set()
        for name, _ in self.store.files(FAULTS_DIR):
            if _FAULTS_RE.fullmatch(name):
                keys |= parse_faults(self.store.read_bytes(f"{FAULTS_DIR}/{name}") or b"")
        return keys

    def write_faults(self, keys: list[FaultKey], first_frame_no: int, last_frame_no: int) -> None:
        """Record decisions before the segment of these frames is written (step 1)."""
        name = faults_name(first_frame_no, last_frame_no)
        earlier = self.store.read_bytes(name)  # left by a crash before its segment
        self.store.write_bytes(name, faults_bytes(set(keys) | parse_faults(earlier or b"")))
