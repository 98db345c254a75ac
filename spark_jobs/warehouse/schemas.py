"""Explicit schemas of every table the jobs read or write.

``LANDING`` is built from ``watch_service.protocol.landing.COLUMNS`` (the sink's row shape),
so the two sides cannot drift. Partition columns are listed last where a table is written
partitioned.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from watch_service.protocol.landing import COLUMNS, NOT_NULL

_TYPES: dict[str, DataType] = {"string": StringType(), "int64": LongType()}


def _fields(*pairs: tuple[str, DataType], nullable: bool = True) -> list[StructField]:
    return [StructField(name, kind, nullable) for name, kind in pairs]


def struct(*pairs: tuple[str, DataType]) -> StructType:
    """A schema of nullable ``(name, type)`` columns (the steps' small driver-side frames)."""
    return StructType(_fields(*pairs))


LANDING = StructType(
    [StructField(name, _TYPES[kind], name not in NOT_NULL) for name, kind in COLUMNS]
)

# One row per delivered frame item: the landing columns plus ``cursor_before``, the frame's
# topic cursor in the consumer's previous frame id (null when unknown).
DELIVERIES = StructType(LANDING.fields + _fields(("cursor_before", LongType())))

# records as read over JDBC: meta and data are the PostgreSQL json columns as text.
SOURCE_RECORDS = StructType(
    _fields(("topic", StringType()), ("seq", LongType()), ("ts", LongType()), nullable=False)
    + _fields(("tag", StringType()), ("node", StringType()), ("meta", StringType()))
    + _fields(("data", StringType()), nullable=False)
)

GAPS = StructType(
    _fields(
        ("topic", StringType()),
        ("gap_from", LongType()),
        ("gap_to", LongType()),
        ("reason", StringType()),
        nullable=False,
    )
)

# One row per (consumer, topic) and seq range [seq, seq_to] with one status: a single seq
# (seq_to = seq) for anything judged from a record or a copy, a range for the seqs of a
# retention gap nobody delivered (tombstoned, unverifiable, silent_gap), so a gap of 10^9
# seqs is one row. ``delivered_hash`` is set only where it adds to ``source_hash``: a
# mismatch's copy, and copies of seqs with no source row.
DETAIL = StructType(
    _fields(
        ("consumer", StringType()),
        ("topic", StringType()),
        ("seq", LongType()),
        ("seq_to", LongType()),
        ("status", StringType()),
        nullable=False,
    )
    + _fields(("source_hash", StringType()), ("delivered_hash", StringType()))
    + _fields(("copies", LongType()), nullable=False)
)

# verify's remaining defects: a defect detail row with how many of its seqs are still unrepaired.
LEFT = StructType(
    [
        StructField("run_id", StringType(), False),
        *DETAIL.fields,
        StructField("left", LongType(), False),
    ]
)

# ``count``: seqs given ``status`` by this run; ``revised``: earlier runs' verdicts of
# ``status`` this run replaced (late copies). Net over all runs: sum(count - revised).
SUMMARY = StructType(
    _fields(
        ("run_id", StringType()),
        ("consumer", StringType()),
        ("topic", StringType()),
        ("status", StringType()),
        ("count", LongType()),
        ("revised", LongType()),
        nullable=False,
    )
)

# reconcile's verdicts other than plain ``delivered``, kept for judging late copies of seqs
# already judged: the newest ``judged_batch`` covering a seq is its current verdict.
LEDGER = StructType(
    _fields(
        ("consumer", StringType()),
        ("topic", StringType()),
        ("seq", LongType()),
        ("seq_to", LongType()),
        ("status", StringType()),
        ("copies", LongType()),
        ("judged_batch", LongType()),
        nullable=False,
    )
)

AUDIT_LOG = StructType(
    _fields(("topic", StringType()), ("seq", LongType()), ("ts", LongType()), nullable=False)
    + _fields(("tag", StringType()), ("node", StringType()), ("meta", StringType()))
    + _fields(
        ("data", StringType()),
        ("data_sha256", StringType()),
        ("origin", StringType()),
        ("date", DateType()),
        nullable=False,
    )
)

# Defects left after backfill, with a few example seqs each (verify's output).
REMAINING = StructType(
    _fields(
        ("run_id", StringType()),
        ("consumer", StringType()),
        ("topic", StringType()),
        ("status", StringType()),
        ("found", LongType()),
        ("remaining", LongType()),
        nullable=False,
    )
    + _fields(("example_seqs", ArrayType(LongType())))
)


def columns(schema: StructType) -> list[str]:
    return [f.name for f in schema.fields]


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Select exactly ``schema``'s columns, in order, cast to its types: a transform's
    schema contract at its start or end."""
    # One expression string per column, sent in one call: building Column objects costs three
    # py4j round trips a column, and conform runs on every table a step reads or writes.
    return df.selectExpr(
        *[f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`" for f in schema.fields]
    )
