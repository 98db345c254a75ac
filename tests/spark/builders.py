"""Literal landing / source rows for the spark tests: a tiny frame-by-frame stream writer."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from watch_service.protocol.landing import (
    COLUMN_NAMES,
    KIND_CAUGHT_UP,
    KIND_RECORD,
    KIND_REWOUND,
    KIND_TOMBSTONE,
    KIND_TOPIC_DELETED,
)


def frame_id(cursors: dict[str, int]) -> str:
    """A composite cursor id as the service writes it (base64url, unpadded, compact JSON)."""
    raw = json.dumps(cursors, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def payload(seq: int, topic: str = "t") -> str:
    return json.dumps({"n": seq, "topic": topic}, separators=(",", ":"))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Stream:
    """One consumer's received frames, as landing rows (tuples in ``COLUMN_NAMES`` order).

    ``cursors`` is the session's starting cursor map; every frame advances its topic's entry
    and carries the whole map as its id, as the service does.
    """

    def __init__(self, consumer: str, cursors: dict[str, int], filter_node: str | None = None):
        self.consumer, self.filter_node = consumer, filter_node
        self.cursors = dict(cursors)
        self.frame_no = 0
        self.rows: list[tuple] = []

    def _frame(self, topic: str, cursor: int, items: list[dict[str, Any]]) -> None:
        self.frame_no += 1
        self.cursors[topic] = cursor
        fid = frame_id(self.cursors)
        for item in items:
            row = {
                "consumer": self.consumer,
                "filter_node": self.filter_node,
                "frame_no": self.frame_no,
                "frame_id": fid,
                "received_ms": 1_000 + self.frame_no,
                "topic": topic,
                "cursor": cursor,
                **item,
            }
            self.rows.append(tuple(row.get(c) for c in COLUMN_NAMES))

    def records(
        self,
        topic: str,
        seqs: list[int],
        cursor: int | None = None,
        data: dict[int, str] | None = None,
        nodes: dict[int, str] | None = None,
    ) -> Stream:
        items = []
        for s in seqs:
            text = (data or {}).get(s, payload(s, topic))
            items.append(
                {
                    "kind": KIND_RECORD,
                    "seq": s,
                    "ts": 1_700_000_000_000 + s,
                    "node": (nodes or {}).get(s),
                    "data": text,
                    "data_sha256": sha(text),
                    "head_seq": max(seqs),
                }
            )
        self._frame(topic, max(seqs) if cursor is None else cursor, items)
        return self

    def tombstone(self, topic: str, gap_from: int, gap_to: int, reason: str = "cap") -> Stream:
        self._frame(
            topic,
            gap_to,
            [{"kind": KIND_TOMBSTONE, "reason": reason, "gap_from": gap_from, "gap_to": gap_to}],
        )
        return self

    def rewound(self, topic: str, gap_from: int, gap_to: int, head: int) -> Stream:
        """The stream's ``rewound`` frame: the cursor goes back to the source's head."""
        self._frame(
            topic,
            head,
            [
                {
                    "kind": KIND_REWOUND,
                    "reason": "source_rewound",
                    "gap_from": gap_from,
                    "gap_to": gap_to,
                    "head_seq": head,
                }
            ],
        )
        return self

    def caught_up(self, topic: str, head: int) -> Stream:
        self._frame(
            topic,
            max(head, self.cursors.get(topic, 0)),
            [{"kind": KIND_CAUGHT_UP, "head_seq": head}],
        )
        return self

    def topic_deleted(self, topic: str, head: int, sink_cursor: bool = False) -> Stream:
        """``sink_cursor``: the row carries the range as the sink writes it (``gap_from``, after
        its cursor before the frame); without, as older sinks wrote it."""
        item: dict[str, Any] = {"kind": KIND_TOPIC_DELETED, "reason": "deleted", "head_seq": head}
        if sink_cursor:
            item |= {"gap_from": self.cursors.get(topic, 0) + 1, "gap_to": head}
        self._frame(topic, max(head, self.cursors.get(topic, 0)), [item])
        return self

    def lose_frame(self, frame_no: int) -> Stream:
        """Drop a frame's rows, as a sink that received it and lost it (cursors still moved)."""
        self.rows = [r for r in self.rows if r[COLUMN_NAMES.index("frame_no")] != frame_no]
        return self


def write_segment(landing, stream: Stream, after: int, upto: int, folder: str = "") -> int:
    """Land ``stream``'s frames ``after < frame_no <= upto`` as one segment file, as the sink
    names it in ``folder`` (``YYYY-MM-DD/HH``; "" for the root, as earlier sinks wrote);
    returns ``upto`` (the next call's ``after``)."""
    import pyarrow as pa

    from watch_service.protocol.landing import COLUMNS
    from watch_service.protocol.landing_keys import segment_key
    from watch_service.storage import Storage

    kinds = {"string": pa.string(), "int64": pa.int64()}
    schema = pa.schema([pa.field(n, kinds[k]) for n, k in COLUMNS])
    frame_no = COLUMN_NAMES.index("frame_no")
    rows = [r for r in stream.rows if after < r[frame_no] <= upto]
    if rows:
        table = pa.Table.from_pylist([dict(zip(COLUMN_NAMES, r)) for r in rows], schema=schema)
        first, last = rows[0][frame_no], rows[-1][frame_no]
        Storage.at(landing).child(stream.consumer).write_parquet(
            segment_key(folder, first, last), table
        )
    return upto


def make_source(url: str, topics: dict[str, dict]) -> dict[tuple[str, int], str]:
    """Topics straight into PostgreSQL: ``{name: {"seqs": [...], "gap": (a, b) | None,
    "nodes": {seq: node}}}``; returns the stored data text per (topic, seq)."""
    import psycopg

    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name, spec in topics.items():
            seqs, gap = spec["seqs"], spec.get("gap")
            earliest = min(seqs) if seqs else (gap[1] + 1 if gap else 1)
            head = max(seqs + ([gap[1]] if gap else []))
            conn.execute(
                "INSERT INTO topics (name, head_seq, earliest_seq) VALUES (%s, %s, %s)",
                (name, head, earliest),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO records (topic, seq, ts, tag, node, meta, data) "
                    "VALUES (%s, %s, %s, NULL, %s, NULL, %s::json)",
                    [
                        (
                            name,
                            s,
                            1_700_000_000_000 + s,
                            spec.get("nodes", {}).get(s),
                            payload(s, name),
                        )
                        for s in seqs
                    ],
                )
            if gap:
                conn.execute(
                    "INSERT INTO gaps (topic, gap_from, gap_to, reason) VALUES (%s, %s, %s, 'cap')",
                    (name, *gap),
                )
            out.update({(name, s): payload(s, name) for s in seqs})
    return out
