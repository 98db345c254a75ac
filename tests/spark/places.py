"""Where a spark test keeps its landing zone and warehouse: a local folder or a fresh prefix
in the session's S3 server (tests that differ by storage run on both), and the reads tests
make of them (through the storage module and pyiceberg, as users' tools do)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from spark_jobs.common import plan_size
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.storage import Storage

from ..conftest import TEST_BUCKET
from ..support import unique

STORAGES = ("file", "s3")
# What the pipeline ships with where the tests' JVMs differ (``support.SPARK_DEFAULTS`` turns
# them off for speed): adaptive execution and generated code. Runtime SQL settings, so one
# module's runs get them in the shared session.
SHIPPED = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}


@contextlib.contextmanager
def shipped_settings(spark) -> Iterator[None]:
    """The runs inside see the shipped Spark settings; the session's own come back after."""
    with plan_size.settings(spark, SHIPPED):
        assert {key: spark.conf.get(key) for key in SHIPPED} == SHIPPED
        yield


def root(kind: str, tmp: Path) -> str:
    """A fresh root location of this kind."""
    return str(tmp) if kind == "file" else f"s3://{TEST_BUCKET}/{unique('t')}"


def join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}"


def audit_rows(
    layout: Layout, url: str, cols=("topic", "seq", "ts", "data", "data_sha256", "origin")
) -> list[tuple]:
    table = readers.audit_log(layout, url).select(list(cols))
    return sorted(tuple(str(r[c]) for c in cols) for r in table.to_pylist())


def table_rows(layout: Layout, url: str, name: str, cols: list[str]) -> list[tuple]:
    table = readers.scan(readers.load(layout, url, name)).select(cols)
    return sorted(tuple(str(r[c]) for c in cols) for r in table.to_pylist())


def landing_storage(location: str) -> Storage:
    return Storage.at(location)


def cached_plans(spark) -> int:
    """How many DataFrames the session's cache holds (shared by every session of its JVM)."""
    return spark._jsparkSession.sharedState().cacheManager().numCachedEntries()
