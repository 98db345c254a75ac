"""Watch frames → landing rows (``watch_service.protocol.landing.COLUMNS``), and the sink's
view of where each topic stands. Pure: no files, no clock, no network.

A record frame gives one row per record it still carries after fault injection; tombstone,
rewound, caught-up and topic-deleted frames give one row each. ``cursor`` is the frame's topic's
value in the composite id; when the id is opaque it is the position the frame itself reports
(last seq, ``gap_to``, ``head_seq``), which is what the server's id would say.

A ``rewound`` frame is the one that moves a cursor back (to the source's head, its id says),
and the search index is told to drop its documents of the rewound range before the records
written again at those seqs arrive (``index_ops``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

import orjson

from watch_service.protocol import cursor as cursor_codec
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.landing import (
    COLUMN_NAMES,
    KIND_CAUGHT_UP,
    KIND_RECORD,
    KIND_REWOUND,
    KIND_TOMBSTONE,
    KIND_TOPIC_DELETED,
    KINDS,
    payload_hash,
)
from watch_service.sink.faults import CORRUPT, DROP, corrupt_data
from watch_service.store.search_index import IndexOp, Rewound

DATA_KINDS = KINDS
# The landing columns the search index needs, in this order (``index_ops``).
INDEX_COLUMNS = ("kind", "topic", "seq", "ts", "tag", "data", "gap_from", "gap_to")
Row = tuple
Fate = Callable[[str, int], str | None]


class FrameError(AuditsyncError, ValueError):
    """A data frame whose payload does not have the protocol's shape."""


@dataclasses.dataclass(frozen=True, slots=True)
class FrameContext:
    consumer: str
    filter_node: str | None
    frame_no: int
    frame_id: str
    received_ms: int


@dataclasses.dataclass(slots=True)
class Landed:
    """What one frame contributes: rows to land plus counters for progress and the index."""

    topic: str
    rows: list[Row]
    records: int = 0  # records in the frame, dropped ones included
    duplicates: int = 0  # records at or below the topic's cursor before this frame
    dropped: int = 0
    corrupted: int = 0
    cursor: int | None = None
    head_seq: int | None = None
    rewound: tuple[int, int] | None = None  # a rewound range: the cursor goes back to ``cursor``


# Record rows are built positionally (the hot path: one per delivered record), so the shared
# column order is checked here once rather than looked up per row.
_RECORD_LAYOUT = (
    "consumer",
    "filter_node",
    "frame_no",
    "frame_id",
    "received_ms",
    "kind",
    "topic",
    "cursor",
    "seq",
    "ts",
    "tag",
    "node",
    "meta",
    "data",
    "data_sha256",
    "reason",
    "gap_from",
    "gap_to",
    "head_seq",
)
if COLUMN_NAMES != _RECORD_LAYOUT:
    raise ImportError("watch_service.protocol.landing.COLUMNS changed; update sink.rows")


def _row(ctx: FrameContext, kind: str, topic: str, cursor: int | None, **cols) -> Row:
    values = {
        "consumer": ctx.consumer,
        "filter_node": ctx.filter_node,
        "frame_no": ctx.frame_no,
        "frame_id": ctx.frame_id,
        "received_ms": ctx.received_ms,
        "kind": kind,
        "topic": topic,
        "cursor": cursor,
        **cols,
    }
    return tuple(values.get(name) for name in COLUMN_NAMES)


def _json_text(value) -> str:
    return orjson.dumps(value).decode()


def frame_rows(
    kind: str,
    payload: object,
    ctx: FrameContext,
    cursors: Mapping[str, int],
    fate: Fate | None = None,
) -> Landed:
    """Rows for one data frame; ``cursors`` are the positions before it (for duplicates)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("topic"), str):
        raise FrameError(f"{kind} frame {ctx.frame_no}: payload is not an object with a topic")
    topic = payload["topic"]
    head = payload.get("head_seq")
    ids = cursor_codec.decode(ctx.frame_id)
    from_id = ids.get(topic) if ids else None
    if kind == KIND_RECORD:
        return _record_rows(payload, ctx, topic, from_id, cursors.get(topic), fate)
    if kind == KIND_REWOUND:
        return _rewound_row(payload, ctx, topic, from_id)
    if kind == KIND_TOMBSTONE:
        gap_from, gap_to = payload.get("gap_from"), payload.get("gap_to")
        fallback = gap_to  # an opaque id: the cursor is where the frame's range ends
    elif kind == KIND_TOPIC_DELETED:
        # The range it signals starts after the topic's cursor before it, as the service sent
        # it: frames this sink received but did not land (lost) still moved that cursor, so
        # the previous *landed* frame's id could start the range too early.
        before = cursors.get(topic)
        gap_from, gap_to, fallback = None if before is None else before + 1, head, head
    elif kind == KIND_CAUGHT_UP:
        gap_from, gap_to, fallback = None, None, head
    else:
        raise FrameError(f"frame {ctx.frame_no}: {kind!r} is not a data frame kind")
    cursor = from_id if from_id is not None else fallback
    row = _range_row(ctx, kind, topic, cursor, payload, gap_from, gap_to, head)
    return Landed(topic, [row], cursor=cursor, head_seq=head)


def _rewound_row(payload: dict, ctx: FrameContext, topic: str, from_id: int | None) -> Landed:
    """The row of a ``rewound`` frame: its exact range is the point of it, so a frame without
    one is malformed. The cursor goes back to where its id says (the head, by default)."""
    head, gap_from, gap_to = payload.get("head_seq"), payload.get("gap_from"), payload.get("gap_to")
    if not (
        isinstance(head, int)
        and isinstance(gap_from, int)
        and isinstance(gap_to, int)
        and not any(isinstance(v, bool) for v in (head, gap_from, gap_to))
    ):
        raise FrameError(f"rewound frame {ctx.frame_no}: head_seq, gap_from, gap_to not integers")
    cursor = from_id if from_id is not None else head
    row = _range_row(ctx, KIND_REWOUND, topic, cursor, payload, gap_from, gap_to, head)
    return Landed(topic, [row], cursor=cursor, head_seq=head, rewound=(gap_from, gap_to))


def _range_row(
    ctx: FrameContext,
    kind: str,
    topic: str,
    cursor: int | None,
    payload: dict,
    gap_from: int | None,
    gap_to: int | None,
    head: int | None,
) -> Row:
    """The row of a frame that signals a range (tombstone, topic deleted, caught up, rewound):
    its kind, cursor, range and head, and the reason the frame gives."""
    return _row(
        ctx,
        kind,
        topic,
        cursor,
        reason=payload.get("reason"),
        gap_from=gap_from,
        gap_to=gap_to,
        head_seq=head,
    )


def index_ops(rows: Iterable[Sequence]) -> list[IndexOp]:
    """What the search index does for landed rows (each as its ``INDEX_COLUMNS``, in landing
    order): upsert every record that carries data, drop the documents of a rewound range."""
    ops: list[IndexOp] = []
    for kind, topic, seq, ts, tag, data, gap_from, gap_to in rows:
        if kind == KIND_RECORD and data is not None:
            ops.append((topic, seq, ts, tag, data))
        elif kind == KIND_REWOUND:
            ops.append(Rewound(topic, gap_from, gap_to))
    return ops


def _record_rows(
    payload: dict,
    ctx: FrameContext,
    topic: str,
    from_id: int | None,
    previous: int | None,
    fate: Fate | None,
) -> Landed:
    records = payload.get("records")
    if not isinstance(records, list):
        raise FrameError(f"record frame {ctx.frame_no}: records is not a list")
    head = payload.get("head_seq")
    cursor = from_id if from_id is not None else payload.get("to_seq")
    out = Landed(topic, [], records=len(records), cursor=cursor, head_seq=head)
    prefix = (
        ctx.consumer,
        ctx.filter_node,
        ctx.frame_no,
        ctx.frame_id,
        ctx.received_ms,
        KIND_RECORD,
        topic,
        cursor,
    )
    for rec in records:
        seq = rec.get("$seq") if isinstance(rec, dict) else None
        if not isinstance(seq, int):
            raise FrameError(f"record frame {ctx.frame_no}: a record has no integer $seq")
        if previous is not None and seq <= previous:
            out.duplicates += 1
        verdict = fate(topic, seq) if fate is not None else None
        if verdict == DROP:
            out.dropped += 1
            continue
        data = _json_text(rec["data"]) if "data" in rec else None
        if data is not None and verdict == CORRUPT:
            data = corrupt_data(data)
            out.corrupted += 1
        meta = rec.get("meta")
        out.rows.append(
            prefix
            + (
                seq,
                rec.get("$ts"),
                rec.get("$tag"),
                rec.get("$node"),
                None if meta is None else _json_text(meta),
                data,
                None if data is None else payload_hash(data),
                None,
                None,
                None,
                head,
            )
        )
    if out.cursor is None and records:
        out.cursor = records[-1]["$seq"]
    return out


def advance(
    cursors: dict[str, int], positions: Mapping[str, int], rewound: str | None = None
) -> bool:
    """Move each topic's cursor up to its value in ``positions``, never down (a re-delivery
    reports older positions), except the ``rewound`` topic's, which goes where its ``rewound``
    frame says (back to the source's head); True if any cursor moved."""
    moved = False
    for topic, seq in positions.items():
        if seq > cursors.get(topic, -1) or (topic == rewound and seq != cursors.get(topic)):
            cursors[topic] = seq
            moved = True
    return moved
