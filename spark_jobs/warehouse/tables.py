"""The warehouse's Iceberg tables, through Spark: the catalog a session needs, each table's
schema, partitioning and properties, and the snapshot summary properties the commits carry.
The commits and reads themselves are ``spark_jobs.warehouse.warehouse.Warehouse``'s.

The table format owns every commit: an append, a dynamic partition overwrite (a step re-run
under the same run id replaces its own rows), a ``MERGE INTO``. Nothing renames a file or
keeps a journal. The catalog is Iceberg's JDBC catalog in the project's PostgreSQL (schema
``iceberg``, created by migration 020): a commit is one compare-and-swap of a row there, so
several writers are safe on any object store.

A session gets the catalog of a warehouse by ``attach`` (runtime settings only, so it works
the same for a job's own JVM and for a client of a long-running Spark Connect server, which
carries the jars and Iceberg's SQL extensions from its start).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

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
    for key, value in hadoop_conf(locations(layout), s3).items():
        conf[key] = value  # read by every Hadoop filesystem the session opens
        conf[f"{prefix}.hadoop.{key}"] = value
    return conf


def locations(layout: Layout) -> list:
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


def run_column(name: str) -> str:
    """The column a run-partitioned table is partitioned by."""
    return SCHEMAS[name][1]


def quote(text: str) -> str:
    """``text`` inside a Spark SQL string literal (this package's statements only)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")
