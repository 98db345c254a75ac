"""The warehouse read from Python without a JVM: pyiceberg over the same JDBC catalog the Spark
steps commit to (the CLI, the Airflow plugin's pages and the tests use it).

A read is of one table's current snapshot, or of the snapshot a pipeline run left it at
(``pipeline_runs.snapshots``), or of the snapshot current at a given time: Iceberg's time
travel, so "what did the audit log hold when run X passed?" is one call.
"""

from __future__ import annotations

import datetime as dt
import functools
import urllib.parse
from typing import TYPE_CHECKING, Any

from spark_jobs.warehouse.layout import NAMESPACE, Layout
from watch_service.storage import S3Config

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table


def sqlalchemy_url(database_url: str) -> str:
    """``postgresql://…`` -> the SQLAlchemy URL of the same database over psycopg 3, with the
    catalog's schema first on the search path (pure)."""
    parts = urllib.parse.urlsplit(database_url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"database URL {database_url!r}: expected postgresql://user@host:port/db")
    query = urllib.parse.parse_qsl(parts.query)
    query.append(("options", "-csearch_path=iceberg"))
    return urllib.parse.urlunsplit(
        ("postgresql+psycopg", parts.netloc, parts.path, urllib.parse.urlencode(query), "")
    )


def catalog(layout: Layout, database_url: str, s3: S3Config | None = None) -> SqlCatalog:
    remote = not layout.warehouse.is_local
    return catalog_named(
        layout.catalog, database_url, (s3 or S3Config.from_env()) if remote else None
    )


def catalog_named(name: str, database_url: str, s3: S3Config | None = None) -> SqlCatalog:
    """The catalog ``name`` (a warehouse's id, ``Layout.catalog``): its tables' metadata
    locations are absolute, so reading needs no warehouse location; ``s3`` to reach S3."""
    from pyiceberg.catalog.sql import SqlCatalog

    props: dict[str, str] = {"uri": sqlalchemy_url(database_url)}
    if s3 is not None:
        props.update(s3.pyiceberg_properties())
    return SqlCatalog(name, **props)


@functools.cache
def shared_catalog(name: str, database_url: str, s3: S3Config | None = None) -> SqlCatalog:
    """``catalog_named``, made once per process (its SQLAlchemy engine pools connections): the
    Spark steps read table metadata through it many times a run."""
    return catalog_named(name, database_url, s3)


def load(layout: Layout, database_url: str, name: str, s3: S3Config | None = None) -> Table:
    return table_in(catalog(layout, database_url, s3), name)


def table_in(catalog: SqlCatalog, name: str) -> Table:
    """The warehouse table ``name`` (``layout.TABLES``) of a catalog."""
    return catalog.load_table(f"{NAMESPACE}.{name}")


def snapshot_at(table: Table, when: dt.datetime) -> int | None:
    """The snapshot current at ``when`` (None: the table was empty then)."""
    ms = int(when.timestamp() * 1000)
    current = None
    for entry in table.history():
        if entry.timestamp_ms <= ms:
            current = entry.snapshot_id
    return current


def scan(
    table: Table,
    snapshot_id: int | None = None,
    row_filter: Any = None,
    columns: tuple = ("*",),
    limit: int | None = None,
) -> pa.Table:
    from pyiceberg.expressions import AlwaysTrue

    return table.scan(
        row_filter=row_filter if row_filter is not None else AlwaysTrue(),
        selected_fields=columns,
        snapshot_id=snapshot_id,
        limit=limit,
    ).to_arrow()


def audit_log(
    layout: Layout,
    database_url: str,
    topic: str | None = None,
    snapshot_id: int | None = None,
    s3: S3Config | None = None,
) -> pa.Table:
    """The audit log (one topic, or all) at a snapshot (default: now), sorted by topic, seq."""
    from pyiceberg.expressions import EqualTo

    table = load(layout, database_url, "audit_log", s3)
    equal: Any = EqualTo  # a pydantic model: its generated signature confuses mypy
    rows = scan(table, snapshot_id, equal("topic", topic) if topic else None)
    return rows.sort_by([("topic", "ascending"), ("seq", "ascending")])
