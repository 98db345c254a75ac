"""The landing-zone record: what the sink writes per delivered frame item, and what the Spark
``compact`` job reads. Shared here so neither side imports the other.

One row per item: a record frame with 3 records gives 3 ``record`` rows; a tombstone,
rewound, caught-up or topic-deleted frame gives one row.

A ``rewound`` row says the source went back (failover, restore): the seqs ``gap_from ..
gap_to`` (inclusive) the consumer was served are no longer the source's and are written again
with new content; ``reason`` is ``source_rewound``, ``head_seq`` the source's head then, and
``cursor`` the head the consumer resumes from. Copies of those seqs landed before the row are
superseded by the records of those seqs landed after it (a higher ``frame_no``).

Segment files are Parquet with exactly these columns, in this order, named
``part-<first_frame_no:012d>-<last_frame_no:012d>.parquet`` in ``<landing>/<consumer>/``'s
``<YYYY-MM-DD>/<HH>/`` folders (or at its root, as earlier sinks wrote: ``landing_keys``),
beside the sink's resume state ``state.json`` (its per-topic ``cursors``, read by the Airflow
sensor and the UI). A segment's Parquet metadata key ``auditsync.sink`` (:data:`FOOTER_KEY`)
holds the sink's footer, JSON: ``first_frame_no``, ``last_frame_no``, ``last_frame_id`` and
``cursors`` (the resume position after the last frame) and ``before_frame_id``, the frame id in
force just before the first frame (compact takes a consumer's start from its first segment's),
and, when some of its records were sent at or below the sink's cursor, ``redelivered``: those
ranges (``protocol/redelivery``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from watch_service.protocol import hashes

STATE_FILE = "state.json"
FOOTER_KEY = b"auditsync.sink"
FOOTER_BEFORE = "before_frame_id"


def footer(metadata: Mapping[bytes, bytes] | None) -> dict | None:
    """A segment's sink footer from its Parquet schema metadata; None when it has none."""
    raw = (metadata or {}).get(FOOTER_KEY)
    return None if raw is None else json.loads(raw)


KIND_RECORD = "record"
KIND_TOMBSTONE = "tombstone"
KIND_CAUGHT_UP = "caught-up"
KIND_TOPIC_DELETED = "topic-deleted"
KIND_REWOUND = "rewound"
KINDS = (KIND_RECORD, KIND_TOMBSTONE, KIND_REWOUND, KIND_CAUGHT_UP, KIND_TOPIC_DELETED)

# (column, type) with types "string" | "int64"; every column is nullable except where noted.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("consumer", "string"),  # not null: the sink's --consumer
    ("filter_node", "string"),  # the consumer's node filter, if any
    ("frame_no", "int64"),  # not null: the sink's own frame counter (re-deliveries get new numbers)
    ("frame_id", "string"),  # the SSE id: composite cursor after this frame
    ("received_ms", "int64"),  # not null
    ("kind", "string"),  # not null: one of the KIND_* values
    ("topic", "string"),  # not null
    ("cursor", "int64"),  # this topic's cursor in frame_id (watermark material)
    ("seq", "int64"),  # record
    ("ts", "int64"),  # record
    ("tag", "string"),  # record
    ("node", "string"),  # record
    ("meta", "string"),  # record: compact JSON text
    ("data", "string"),  # record: compact JSON text
    ("data_sha256", "string"),  # record: payload_hash(data)
    ("reason", "string"),  # tombstone / rewound / topic-deleted
    # tombstone / rewound: the range's first seq; topic-deleted: the sink's cursor before + 1
    ("gap_from", "int64"),
    ("gap_to", "int64"),  # tombstone / rewound / topic-deleted: last seq of the range (inclusive)
    ("head_seq", "int64"),  # every kind that reports one
)
COLUMN_NAMES = tuple(c for c, _ in COLUMNS)
# The columns every landing row has, whatever its kind: the sink's Arrow schema, the Spark
# LANDING schema and the Great Expectations suites all take their nullability from here.
NOT_NULL = frozenset({"consumer", "frame_no", "received_ms", "kind", "topic"})


# ``data_sha256`` is ``hashes.payload_hash`` of a payload's compact JSON text, as stored in
# PostgreSQL ``records.data`` (the service stores ``orjson.dumps(payloads.loads_exact(sent))``,
# numbers as sent, and ``orjson.dumps(payloads.loads_exact(x)) == x`` for that text, so a
# consumer re-encoding a delivered payload that way hashes the stored text).
payload_hash = hashes.payload_hash
