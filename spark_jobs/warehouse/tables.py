"""The warehouse's Iceberg tables, through Spark: the catalog a session needs, each table's
schema and partitioning, and the few ways the jobs read and write them.

The table format owns every commit: an append, a dynamic partition overwrite (a step re-run
under the same run id replaces its own rows), a ``MERGE INTO``. Nothing here renames a file or
keeps a journal. The catalog is Iceberg's JDBC catalog in the project's PostgreSQL (schema
``iceberg``, created by migration 020): a commit is one compare-and-swap of a row there, so
several writers are safe on any object store.

A session gets the catalog of a warehouse by ``attach`` (runtime settings only, so it works
the same for a job's own JVM and for a client of a long-running Spark Connect server, which
carries the jars and Iceberg's SQL extensions from its start).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_jobs.common import local_rows
from spark_jobs.common.jdbc import jdbc_target
from spark_jobs.common.old_layout import refuse_old
from spark_jobs.warehouse.layout import NAMESPACE, Layout
from spark_jobs.warehouse.schemas import (
    AUDIT_LOG,
    DELIVERIES,
    DETAIL,
    LEDGER,
    LEFT,
    SUMMARY,
    conform,
)
from watch_service.storage import S3Config, Storage, hadoop_conf

CATALOG_IMPL = "org.apache.iceberg.spark.SparkCatalog"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
COMPACT_PROPERTY = "auditsync.compact"
RUN_PROPERTY = "auditsync.run-id"
STEP_PROPERTY = "auditsync.step"
# The ledger partition that holds the pruned runs' ledger rows (spark_jobs.lifecycle.prune):
# reconcile reads it with the committed runs' partitions, so late copies of seqs a pruned run
# judged are judged against their verdicts. Not a run id: no run is ever called this.
PRUNED_LEDGER = "(pruned)"

_RUN = StructField("run_id", StringType(), False)
_BATCH = StructField("batch", LongType(), False)

# name -> (schema, partition spec, extra table properties)
SCHEMAS: dict[str, tuple[StructType, str, dict[str, str]]] = {
    "deliveries": (StructType([*DELIVERIES.fields, _BATCH]), "consumer", {}),
    "detail": (StructType([*DETAIL.fields, _RUN]), "run_id", {}),
    "summary": (SUMMARY, "run_id", {}),
    "ledger": (StructType([*LEDGER.fields, _RUN]), "run_id", {}),
    # LEFT's run_id is the run whose defect it is (this run's or a carried one's).
    "remaining": (
        StructType([*LEFT.fields, StructField("verify_run", StringType(), False)]),
        "verify_run",
        {},
    ),
    "audit_log": (
        StructType([*AUDIT_LOG.fields, _RUN]),
        "topic, date",
        {
            # Repairs are row-level deletes plus new rows, not rewrites of the day's files.
            "write.merge.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
            "write.delete.mode": "merge-on-read",
        },
    ),
    "audit_detail": (StructType([*DETAIL.fields, _RUN]), "run_id", {}),
    "audit_summary": (SUMMARY, "run_id", {}),
}
BASE_PROPERTIES = {
    "format-version": "2",
    # A run writes little: no shuffle before a write (each task writes the partitions it
    # holds, fanned out); maintenance compacts the small files this leaves.
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
    "write.parquet.compression-codec": "zstd",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}


def catalog_conf(layout: Layout, database_url: str, s3: S3Config | None = None) -> dict[str, str]:
    """The runtime settings that make ``layout.catalog`` an Iceberg catalog in this session
    (pure: tested without a JVM)."""
    target = jdbc_target(database_url)
    prefix = f"spark.sql.catalog.{layout.catalog}"
    conf = {
        prefix: CATALOG_IMPL,
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": f"{target.url}?currentSchema=iceberg",
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.warehouse": layout.warehouse.hadoop_uri,
        f"{prefix}.cache-enabled": "false",
    }
    for key in ("user", "password"):
        if target.properties.get(key):
            conf[f"{prefix}.jdbc.{key}"] = target.properties[key]
    for key, value in hadoop_conf(_locations(layout), s3).items():
        conf[key] = value  # read by every Hadoop filesystem the session opens
        conf[f"{prefix}.hadoop.{key}"] = value
    return conf


def _locations(layout: Layout) -> list:
    return [layout.warehouse, *([layout.landing_location] if layout.landing else [])]


def ddl(layout: Layout, name: str) -> str:
    schema, partitioning, extra = SCHEMAS[name]
    columns = ", ".join(
        f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
        for f in schema.fields
    )
    props = ", ".join(f"'{k}' = '{v}'" for k, v in {**BASE_PROPERTIES, **extra}.items())
    return (
        f"CREATE TABLE IF NOT EXISTS {layout.table(name)} ({columns}) USING iceberg "
        f"PARTITIONED BY ({partitioning}) TBLPROPERTIES ({props})"
    )


def attach(
    spark: SparkSession, layout: Layout, database_url: str, s3: S3Config | None = None
) -> None:
    """Configure the warehouse's catalog in this session and create what is missing; once per
    session (a marker setting says it was done). A warehouse still in a hand-written Parquet
    layout is refused with the command that converts it (``spark_jobs.common.old_layout``)."""
    conf = catalog_conf(layout, database_url, s3)
    _register(layout, database_url, s3)
    marker = f"spark.sql.catalog.{layout.catalog}.auditsync-attached"
    digest = str(hash(tuple(sorted(conf.items()))))
    if spark.conf.get(marker, None) == digest:
        return
    refuse_old(Storage(layout.warehouse), layout.work)
    create(spark, layout, database_url, s3)
    spark.conf.set(marker, digest)


def create(
    spark: SparkSession, layout: Layout, database_url: str, s3: S3Config | None = None
) -> None:
    """Configure the warehouse's catalog in this session and create the tables missing."""
    _register(layout, database_url, s3)
    for key, value in catalog_conf(layout, database_url, s3).items():
        spark.conf.set(key, value)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {layout.catalog}.{NAMESPACE}")
    existing = {
        r["tableName"] for r in spark.sql(f"SHOW TABLES IN {layout.catalog}.{NAMESPACE}").collect()
    }
    for name in SCHEMAS:
        if name not in existing:
            spark.sql(ddl(layout, name))
            if name == "audit_log":
                spark.sql(f"ALTER TABLE {layout.table(name)} WRITE LOCALLY ORDERED BY topic, seq")


def read(spark: SparkSession, layout: Layout, name: str, snapshot: int | None = None) -> DataFrame:
    """The table now, or at ``snapshot``: a DataFrame is evaluated lazily, so one read again
    after a later commit to the same table must pin the snapshot it means."""
    if snapshot is None:
        return spark.table(layout.table(name))
    return spark.sql(f"SELECT * FROM {layout.table(name)} VERSION AS OF {int(snapshot)}")


def pinned(spark: SparkSession, layout: Layout, name: str) -> DataFrame:
    """The table as it is now, pinned to its current snapshot (no rows when it has none). For a
    DataFrame a step caches and then writes the same table under: Spark re-caches every cached
    plan that reads a table just written, with the new rows, and that entry no longer matches
    the DataFrame, whose ``unpersist`` then misses it (one leaked entry per run, measured)."""
    snapshot = current_snapshot(spark, layout, name)
    if snapshot is None:
        return local_rows.empty(spark, SCHEMAS[name][0])
    return read(spark, layout, name, snapshot)


def run_column(name: str) -> str:
    """The column a run-partitioned table is partitioned by."""
    return SCHEMAS[name][1]


def run_rows(
    spark: SparkSession, layout: Layout, name: str, run_id: str, snapshot: int | None = None
) -> DataFrame:
    """One run's rows of a run-partitioned table, in the table's schema."""
    return read(spark, layout, name, snapshot).filter(F.col(run_column(name)) == run_id)


def runs_rows(
    spark: SparkSession, layout: Layout, name: str, run_ids: list[str], pin: bool = False
) -> DataFrame:
    """These runs' rows of a run-partitioned table; ``pin``: read through ``pinned``."""
    if not run_ids:
        return local_rows.empty(spark, SCHEMAS[name][0])
    rows = pinned(spark, layout, name) if pin else read(spark, layout, name)
    return rows.filter(F.col(run_column(name)).isin(*run_ids))


def run_details(spark: SparkSession, layout: Layout, run_ids: list[str]) -> DataFrame:
    """The detail of these runs (those whose rows still exist), with a ``run_id``."""
    return runs_rows(spark, layout, "detail", run_ids).select(
        *[F.col(f.name) for f in DETAIL.fields], "run_id"
    )


def _writer(df: DataFrame, layout: Layout, name: str, properties: Mapping[str, str]) -> Any:
    writer = conform(df, SCHEMAS[name][0]).writeTo(layout.table(name))
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    return writer


def replace_run(layout: Layout, name: str, run_id: str, df: DataFrame) -> None:
    """Make ``df`` the run's rows of a run-partitioned table, in one commit: an overwrite by
    the run's partition filter, which also empties the partition when ``df`` has no rows (so
    ``df`` is computed once, not first counted)."""
    column = run_column(name)
    rows = df.withColumn(column, F.lit(run_id))
    _writer(rows, layout, name, {RUN_PROPERTY: run_id}).overwrite(F.col(column) == F.lit(run_id))


def append(layout: Layout, name: str, df: DataFrame, properties: Mapping[str, str]) -> None:
    _writer(df, layout, name, properties).append()


MERGE_VIEW = "auditsync_merge_updates"


def merge(
    spark: SparkSession,
    layout: Layout,
    name: str,
    updates: DataFrame,
    bounds: list[tuple[str, int, int]],
) -> None:
    """``MERGE INTO`` the table on (topic, seq): each row of ``updates`` replaces the row with
    its key. ``bounds`` (topic, lo, hi inclusive), the updates' seq ranges, narrow the target's
    scan to the files that can hold them."""
    inside = " OR ".join(
        f"(t.topic = '{_quote(topic)}' AND t.seq BETWEEN {int(lo)} AND {int(hi)})"
        for topic, lo, hi in bounds
    )
    conform(updates, SCHEMAS[name][0]).createOrReplaceTempView(MERGE_VIEW)
    try:
        spark.sql(
            f"MERGE INTO {layout.table(name)} t USING {MERGE_VIEW} s "
            f"ON t.topic = s.topic AND t.seq = s.seq AND ({inside}) "
            f"WHEN MATCHED THEN UPDATE SET *"
        )
    finally:
        spark.catalog.dropTempView(MERGE_VIEW)


# Per catalog this process attached, how pyiceberg reaches it: the steps read table metadata
# (current snapshots, compact's state) through pyiceberg, which reads the catalog row and the
# metadata file directly, instead of a Spark job over a metadata table (a second or more each).
_METADATA_ACCESS: dict[str, tuple[str, S3Config | None]] = {}


def _register(layout: Layout, database_url: str, s3: S3Config | None) -> None:
    local = all(loc.is_local for loc in _locations(layout))
    _METADATA_ACCESS[layout.catalog] = (database_url, None if local else s3 or S3Config.from_env())


def _metadata(spark: SparkSession, layout: Layout, name: str) -> Any:
    """The table's current Iceberg metadata (what Spark sees too: its catalog cache is off)."""
    from spark_jobs.warehouse import readers

    database_url, s3 = _METADATA_ACCESS[layout.catalog]
    catalog = readers.shared_catalog(layout.catalog, database_url, s3)
    return catalog.load_table(f"{NAMESPACE}.{name}").metadata


def current_snapshot(spark: SparkSession, layout: Layout, name: str) -> int | None:
    return _metadata(spark, layout, name).current_snapshot_id


def snapshots(spark: SparkSession, layout: Layout, names: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for name in names:
        snap = current_snapshot(spark, layout, name)
        if snap is not None:
            out[name] = snap
    return out


def compact_snapshot(spark: SparkSession, layout: Layout) -> dict[str, Any] | None:
    """The newest snapshot in the deliveries table's current history whose summary carries
    compact's state: ``{snapshot_id, committed_ms, state}``, or None."""
    from pyiceberg.table.snapshots import ancestors_of

    metadata = _metadata(spark, layout, "deliveries")
    for snap in ancestors_of(metadata.current_snapshot(), metadata):
        state = snap.summary.get(COMPACT_PROPERTY) if snap.summary is not None else None
        if state is not None:
            return {
                "snapshot_id": snap.snapshot_id,
                "committed_ms": snap.timestamp_ms,
                "state": state,
            }
    return None


def compact_state(spark: SparkSession, layout: Layout) -> dict:
    """The newest compact commit's cumulative state (batch, per-consumer progress)."""
    row = compact_snapshot(spark, layout)
    if row is None:
        return {"batch": 0, "consumers": {}}
    return json.loads(row["state"])


def snapshot_summary(
    spark: SparkSession, layout: Layout, name: str, properties: Mapping[str, str]
) -> dict[str, str] | None:
    """The summary of the newest snapshot in the table's current history that carries these
    summary properties (None: there is none)."""
    t = layout.table(name)
    matches = " ".join(
        f"AND s.summary['{_quote(k)}'] = '{_quote(v)}'" for k, v in properties.items()
    )
    row = spark.sql(
        f"SELECT s.summary FROM {t}.snapshots s JOIN {t}.history h "
        f"ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor {matches} "
        f"ORDER BY h.made_current_at DESC LIMIT 1"
    ).first()
    return None if row is None else dict(row["summary"])


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
