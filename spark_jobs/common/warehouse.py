"""Opening the warehouse: its layout version (and the one-time migration of a warehouse the
full-rebuild pipeline wrote), and reading its tables by explicit file lists or partitions.

Layout 1 (the full-rebuild pipeline) rebuilt ``deliveries/`` from every landing segment each
run, partitioned by consumer only, and kept no record of what was reconciled. Layout 2 cannot
extend it, so on first contact its ``deliveries/`` is moved aside to
``deliveries.layout1/`` (delete it when satisfied), the landing zone is compacted afresh into
batches, and the first incremental run judges the whole history once. The audit log has the
same shape in both (one row per topic+seq, partitioned by topic and date) and is kept: the
runs merge into it. A message says all this once; ``_layout.json`` marks the migration done.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from spark_jobs.common import storage
from spark_jobs.common.schemas import conform
from spark_jobs.layout import LAYOUT_VERSION, Layout
from watch_service.protocol.errors import AuditsyncError


class WarehouseError(AuditsyncError):
    """The warehouse cannot be used as it is; the message says why and what to do."""


def identity(layout: Layout) -> str:
    """The warehouse's id (PostgreSQL keys its reconcile progress by it), preparing it first."""
    prepare(layout)
    return storage.read_json(layout.marker)["id"]


def prepare(layout: Layout) -> str | None:
    """Make sure ``layout.work`` is a layout-2 warehouse; returns the migration message when
    one was migrated now, else None."""
    marker = storage.read_json(layout.marker)
    if marker is not None:
        if marker.get("version") != LAYOUT_VERSION:
            raise WarehouseError(
                f"{layout.work}: layout version {marker.get('version')}, this "
                f"pipeline writes version {LAYOUT_VERSION}"
            )
        return None
    message = None
    old = layout.deliveries
    if old.is_dir() and not layout.batches.is_dir():
        aside = old.with_name("deliveries.layout1")
        storage.remove(aside)
        old.rename(aside)
        message = (
            f"[pipeline] {layout.work} was written by the full-rebuild pipeline "
            f"(layout 1): its deliveries table is moved aside to {aside} and rebuilt "
            f"incrementally from the landing zone {layout.landing}; the audit log is "
            f"kept. This run judges the whole history once; later runs only what is "
            f"new."
        )
        print(message, file=sys.stderr, flush=True)
    layout.work.mkdir(parents=True, exist_ok=True)
    storage.write_json(layout.marker, {"version": LAYOUT_VERSION, "id": uuid.uuid4().hex})
    return message


def read_files(spark: SparkSession, root: Path, files: list[str], schema: StructType) -> DataFrame:
    """The rows of ``files`` (relative to the hive-partitioned table at ``root``), as
    ``schema``; an empty frame for no files."""
    if not files:
        return spark.createDataFrame([], schema)
    df = (
        spark.read.schema(schema)
        .option("basePath", str(root))
        .parquet(*[str(root / f) for f in files])
    )
    return conform(df, schema)


def read_table(spark: SparkSession, root: Path, schema: StructType) -> DataFrame:
    """A whole (hive-partitioned) table; empty when it has no data files yet."""
    if not storage.data_files(root):
        return spark.createDataFrame([], schema)
    return conform(
        spark.read.schema(schema).option("basePath", str(root)).parquet(str(root)), schema
    )


def read_partitions(
    spark: SparkSession, root: Path, folders: list[str], schema: StructType
) -> DataFrame:
    """Rows of the given partition folders (relative to ``root``) that exist."""
    present = [f for f in folders if (root / f).is_dir() and storage.data_files(root / f)]
    if not present:
        return spark.createDataFrame([], schema)
    return conform(
        spark.read.schema(schema)
        .option("basePath", str(root))
        .parquet(*[str(root / f) for f in present]),
        schema,
    )
