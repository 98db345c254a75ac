"""The sink's folder ``<landing>/<consumer>/``: append-only Parquet segments, the resume state,
the fault log, and the lock that keeps two sinks off one consumer.

Durability protocol (see ``durable.py`` for the primitives):

1. fault decisions for the buffered frames are appended to ``faults.jsonl`` and fsynced;
2. the segment ``part-<first:012d>-<last:012d>.parquet`` is written to a temp file, fsynced,
   renamed into place and the folder fsynced; its footer metadata carries the resume position
   after its last frame (frame id, frame_no, cursor map);
3. only then is ``state.json`` (wid, last id, frame_no, cursors, index progress) replaced the
   same way.

A crash between 2 and 3 is repaired on load: the newest segment's footer is ahead of
``state.json`` and wins, so frame numbers never repeat and nothing it holds is re-requested.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import re
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.landing import COLUMNS, NOT_NULL
from watch_service.sink import durable
from watch_service.sink.faults import KINDS, FaultKey
from watch_service.sink.rows import INDEX_COLUMNS, index_ops
from watch_service.store.search_index import IndexOp

STATE_FILE = "state.json"
FAULTS_FILE = "faults.jsonl"
LOCK_FILE = ".lock"
META_KEY = b"auditsync.sink"
_SEGMENT_RE = re.compile(r"part-(\d{12})-(\d{12})\.parquet")
_TYPES = {"string": pa.string(), "int64": pa.int64()}
SCHEMA = pa.schema(
    [pa.field(name, _TYPES[kind], nullable=name not in NOT_NULL) for name, kind in COLUMNS]
)


class LandingError(AuditsyncError):
    """The consumer folder is unusable (locked by another sink, unreadable state)."""


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
    path: Path


def segment_name(first_frame_no: int, last_frame_no: int) -> str:
    return f"part-{first_frame_no:012d}-{last_frame_no:012d}.parquet"


def rows_table(rows: list[tuple]) -> pa.Table:
    columns = list(zip(*rows)) if rows else [()] * len(COLUMNS)
    return pa.Table.from_arrays(
        [pa.array(col, type=field.type) for col, field in zip(columns, SCHEMA)], schema=SCHEMA
    )


class Landing:
    def __init__(self, root: Path, consumer: str) -> None:
        self.dir = Path(root) / consumer
        self._lock_fd: int | None = None

    def open(self) -> None:
        """Create the folder, take the lock, and clear temp files a crash left behind."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LandingError(f"{self.dir}: another sink holds this consumer's lock") from None
        self._lock_fd = fd
        durable.remove_temp_files(self.dir)
        # pyarrow imports pandas on its first array, which can take seconds: pay that here,
        # not inside the first flush while frames queue up.
        rows_table([])

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def segments(self) -> list[Segment]:
        found = []
        for p in self.dir.iterdir():
            m = _SEGMENT_RE.fullmatch(p.name)
            if m:
                found.append(Segment(int(m.group(1)), int(m.group(2)), p))
        return sorted(found, key=lambda s: s.first_frame_no)

    def load_state(self) -> SinkState:
        """``state.json``, advanced to the newest segment's footer if that is ahead of it."""
        path = self.dir / STATE_FILE
        try:
            state = SinkState.from_json(path.read_bytes()) if path.exists() else SinkState()
        except (ValueError, TypeError) as exc:
            raise LandingError(f"{path}: unreadable sink state ({exc})") from None
        segments = self.segments()
        if segments and segments[-1].last_frame_no > state.frame_no:
            footer = self.segment_footer(segments[-1].path)
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
        durable.replace_bytes(self.dir / STATE_FILE, payload)

    def write_segment(
        self,
        rows: list[tuple],
        first_frame_no: int,
        last_frame_no: int,
        last_frame_id: str,
        cursors: dict[str, int],
    ) -> Path:
        footer = {
            "first_frame_no": first_frame_no,
            "last_frame_no": last_frame_no,
            "last_frame_id": last_frame_id,
            "cursors": cursors,
        }
        table = rows_table(rows).replace_schema_metadata({META_KEY: orjson.dumps(footer)})
        target = self.dir / segment_name(first_frame_no, last_frame_no)
        if target.exists():
            raise LandingError(f"{target}: segment exists; frame numbers must never repeat")
        durable.replace_file(target, lambda f: pq.write_table(table, f))
        return target

    @staticmethod
    def segment_footer(path: Path) -> dict:
        meta = pq.read_schema(path).metadata or {}
        if META_KEY not in meta:
            raise LandingError(f"{path}: segment has no sink footer")
        return orjson.loads(meta[META_KEY])

    @staticmethod
    def segment_index_ops(path: Path) -> list[IndexOp]:
        """What the search index does for a segment's rows (``rows.index_ops``)."""
        cols = pq.read_table(path, columns=list(INDEX_COLUMNS)).to_pydict()
        return index_ops(zip(*(cols[c] for c in INDEX_COLUMNS), strict=True))

    def load_faults(self) -> set[FaultKey]:
        """Fault decisions on record, deduplicated by (kind, topic, seq)."""
        keys: set[FaultKey] = set()
        for line in durable.read_lines(self.dir / FAULTS_FILE):
            entry = orjson.loads(line)
            if entry.get("kind") in KINDS:
                keys.add((entry["kind"], entry["topic"], entry["seq"]))
        return keys

    def append_faults(self, keys: list[FaultKey]) -> None:
        durable.append_lines(
            self.dir / FAULTS_FILE,
            (orjson.dumps({"kind": kind, "topic": topic, "seq": seq}) for kind, topic, seq in keys),
        )
