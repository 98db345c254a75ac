"""The one-time conversion of a warehouse the hand-written Parquet layouts left behind into the
Iceberg tables (``spark_jobs.layout``): ``tables.attach`` calls ``convert`` at the start of
every step, and it costs one or two file lookups unless there is something to convert.

Layout 2 (the incremental pipeline before Iceberg; ``_layout.json`` {"version": 2, "id"})::

    deliveries/consumer=C/topic=T/bNNNNNNNN-*.parquet   batch N's rows (committed when
    deliveries/_batches/bNNNNNNNN.json                  its record exists; cumulative state)
    ledger/run=R/consumer=C/topic=T/   audit_log/topic=T/date=D/
    runs/R/{detail,summary,remaining}/ runs/R/manifest.json   audits/A/{detail,summary}/

Every committed batch, verdict and audit-log row is appended to its table as it is (the
deliveries with ``batch`` from the file name and the newest commit record as compact's state,
so the next compact continues after the same segments), then PostgreSQL's runs of the old
warehouse id are re-keyed to the catalog name (``reconcile_runs.warehouse``), so the next run
judges only what is new. Runs count as committed when PostgreSQL or a manifest says so; a
crashed run's leftovers are not verdicts and are not converted. An audit-log row's ``run_id``
is the run whose manifest last lists its partition (whole partitions were rewritten), else
``legacy``.

Layout 1 (the full-rebuild pipeline: ``deliveries/`` by consumer only, no ``_layout.json``,
no incremental state): the audit log is converted; the deliveries are not, the landing zone
is compacted afresh by the normal compact and the first run judges the whole history.

Crash-safe: each table's append is one Iceberg commit carrying ``auditsync.legacy = <old
id>``, and a table that has one is not appended again; the re-keying is idempotent; the old
folders move aside to ``<work>/legacy-layout<N>/`` last (the marker, or layout 1's
``deliveries/``, the very last), so a conversion killed anywhere finishes on the next step.
One message on stderr says what was converted and where the old files are.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, StructField, StructType

from spark_jobs.common import store, tables
from spark_jobs.common.schemas import AUDIT_LOG, DELIVERIES, DETAIL, LEDGER, SUMMARY
from spark_jobs.layout import Layout
from spark_jobs.verify.transforms import LEFT
from watch_service.storage import Storage
from watch_service.store import runs

MARKER = "_layout.json"
LEGACY_PROPERTY = "auditsync.legacy"
UNKNOWN_RUN = "legacy"
FOLDERS = ("audits", "runs", "ledger", "audit_log", "deliveries")  # moved in this order
RECORD_RE = re.compile(r"b(\d{8})\.json")
FILE_BATCH_RE = r"^b(\d{8})-"


class Found:
    """What an old warehouse is: its layout version and the id its runs are keyed by."""

    def __init__(self, version: int, old_id: str) -> None:
        self.version, self.old_id = version, old_id

    @property
    def key(self) -> str:
        """The ``auditsync.legacy`` value of its converted tables' commits."""
        return self.old_id or f"layout{self.version}"

    @property
    def aside(self) -> str:
        return f"legacy-layout{self.version}"


def detect(house: Storage) -> Found | None:
    """The old layout at ``house``, or None (nothing to convert)."""
    if not house.location.is_local:
        return None  # the hand-written layouts lived on one local filesystem only
    marker = house.read_bytes(MARKER)
    if marker is not None:
        value = json.loads(marker)
        if value.get("version") != 2:
            raise tables.WarehouseError(
                f"{house.uri(MARKER)}: layout version {value.get('version')}; only layout 2 "
                f"(or layout 1, without a marker) can be converted"
            )
        return Found(2, str(value.get("id") or ""))
    if house.is_folder("deliveries"):
        return Found(2 if house.is_folder("deliveries/_batches") else 1, "")
    return None


def compact_state(record: Mapping) -> dict[str, Any]:
    """A layout-2 commit record -> compact's cumulative state (pure)."""
    keep: dict[str, Any] = {
        "batch": int(record["batch"]),
        "consumers": dict(record.get("consumers", {})),
    }
    if record.get("run_id") is not None:
        keep["run_id"] = record["run_id"]
    return keep


def partition_key(folder: str) -> tuple[str, dt.date]:
    """``topic=a%3Ab/date=2024-01-02`` -> ``("a:b", date(2024, 1, 2))`` (pure)."""
    values = dict(part.split("=", 1) for part in folder.split("/"))
    return urllib.parse.unquote(values["topic"]), dt.date.fromisoformat(values["date"])


def last_writers(
    manifests: Mapping[str, Mapping], order: Mapping[str, tuple[int, object]]
) -> dict[tuple[str, dt.date], str]:
    """Per audit-log partition, the run that rewrote it last: runs ordered by the last batch
    they read, then by when PostgreSQL recorded them, then by id (pure)."""

    def rank(run: str) -> tuple:
        batch_to, recorded = order.get(run, (int(manifests[run]["batches"][1]), None))
        return (batch_to, recorded is not None, recorded or 0, run)

    out: dict[tuple[str, dt.date], str] = {}
    for run in sorted(manifests, key=rank):
        for folder in manifests[run].get("audit_partitions", []):
            out[partition_key(folder)] = run
    return out


def message(layout: Layout, found: Found, batch: int, added: Mapping[str, int], moved: int) -> str:
    """The one message a conversion prints (pure)."""
    rows = ", ".join(f"{name} {n}" for name, n in added.items()) or "none"
    if found.version == 2:
        kept = (
            f" Delivery batches 1..{batch} are kept (compact continues after them); "
            f"PostgreSQL's {moved} reconcile run(s) of warehouse {found.old_id or '(no id)'} "
            f"are now keyed {layout.catalog}, so the next run judges only what is new."
        )
    else:
        kept = (
            " Its deliveries and run outputs are not converted (they hold no incremental "
            "state): the landing zone is compacted afresh and this run judges the whole "
            "history once."
        )
    return (
        f"[pipeline] {layout.work} was a layout-{found.version} warehouse (hand-written "
        f"Parquet): converted once into the Iceberg tables of catalog {layout.catalog} "
        f"(rows: {rows}).{kept} The old files are in {layout.warehouse.join(found.aside)}; "
        f"nothing reads them any more: delete them when satisfied."
    )


def convert(
    spark: SparkSession,
    layout: Layout,
    database_url: str,
    hook: Callable[[str], None] | None = None,
) -> str | None:
    """Convert an old-layout warehouse once (see above); the message printed, or None when
    there was nothing to convert. ``hook(point)`` is called after each table's commit and each
    move (tests kill the conversion there)."""
    house = Storage(layout.warehouse)
    found = detect(house)
    if found is None:
        return None
    old = _Old(spark, layout, house, found, database_url)
    readers: dict[str, Callable[[], DataFrame | None]] = {"audit_log": old.audit_log}
    if found.version == 2:
        readers = {
            "deliveries": old.deliveries,
            "ledger": old.ledger,
            "detail": functools.partial(old.per_run, "runs", "detail", DETAIL, "run_id"),
            "summary": functools.partial(old.per_run, "runs", "summary", SUMMARY, None),
            "remaining": functools.partial(old.per_run, "runs", "remaining", LEFT, "verify_run"),
            "audit_detail": functools.partial(old.per_run, "audits", "detail", DETAIL, "run_id"),
            "audit_summary": functools.partial(old.per_run, "audits", "summary", SUMMARY, None),
            **readers,
        }
    added: dict[str, int] = {}
    for name, read in readers.items():
        done = {LEGACY_PROPERTY: found.key}
        summary = tables.snapshot_summary(spark, layout, name, done)
        if summary is None:
            rows = read()
            if rows is None:
                continue
            if name == "deliveries":
                done[tables.COMPACT_PROPERTY] = json.dumps(old.state, sort_keys=True)
            tables.append(layout, name, rows, done)
            if hook:
                hook(f"legacy.{name}")
            summary = tables.snapshot_summary(spark, layout, name, done) or {}
        added[name] = int(summary.get("added-records", 0))
    moved = 0
    if found.old_id:
        with store.connect(database_url) as conn:
            runs.move_warehouse(conn, found.old_id, layout.catalog)
            # Every step converts first, so the catalog's runs are all the old warehouse's.
            moved = len(runs.committed_runs(conn, layout.catalog))
    for name in (*FOLDERS, MARKER):
        if house.exists(name):
            house.move(name, f"{found.aside}/{name}")
            if hook:
                hook("legacy.moving")
    batch = tables.compact_state(spark, layout)["batch"] if found.version == 2 else 0
    text = message(layout, found, batch, added, moved)
    print(text, file=sys.stderr, flush=True)
    return text


class _Old:
    """The old warehouse's committed contents, read by Spark (each table on demand)."""

    def __init__(
        self, spark: SparkSession, layout: Layout, house: Storage, found: Found, url: str
    ) -> None:
        self.spark, self.layout, self.house, self.found = spark, layout, house, found
        order: dict[str, tuple[int, object]] = {}
        if found.old_id:
            with store.connect(url) as conn:
                order = runs.run_order(conn, found.old_id)
        self.manifests = {
            r: json.loads(text)
            for r in house.folders("runs")
            if (text := house.read_bytes(f"runs/{r}/manifest.json")) is not None
        }
        self.committed = sorted(set(order) | set(self.manifests))
        self.order = order
        numbers = sorted(
            int(m.group(1))
            for name, _ in house.files("deliveries/_batches")
            if (m := RECORD_RE.fullmatch(name))
        )
        latest = numbers and house.read_bytes(f"deliveries/_batches/b{numbers[-1]:08d}.json")
        self.state: dict[str, Any] = (
            compact_state(json.loads(latest)) if latest else {"batch": 0, "consumers": {}}
        )
        self.audits = house.folders("audits")

    def _uri(self, rel: str) -> str:
        return self.layout.warehouse.join(rel).hadoop_uri

    def _has_parquet(self, rel: str) -> bool:
        return any(
            name.endswith(".parquet") and not name.startswith("_")
            for name, _ in self.house.files(rel, recursive=True)
        )

    def _table(self, rel: str, schema: StructType) -> DataFrame | None:
        """A hive-partitioned folder's rows (Spark skips ``_``/``.`` names: staging, records)."""
        if not self._has_parquet(rel):
            return None
        uri = self._uri(rel)
        return self.spark.read.schema(schema).option("basePath", uri).parquet(uri)

    def deliveries(self) -> DataFrame | None:
        # Batches commit in order and a crashed one is redone under its own number, so the
        # files of batches up to the newest record are exactly the committed rows.
        rows = self._table("deliveries", DELIVERIES) if self.state["batch"] else None
        if rows is None:
            return None
        batch = F.regexp_extract(F.col("_metadata.file_name"), FILE_BATCH_RE, 1).cast("long")
        return rows.withColumn("batch", batch).filter(F.col("batch") <= self.state["batch"])

    def ledger(self) -> DataFrame | None:
        rows = self._table("ledger", StructType([*LEDGER.fields, StructField("run", StringType())]))
        if rows is None or not self.committed:
            return None
        return rows.filter(F.col("run").isin(*self.committed)).withColumnRenamed("run", "run_id")

    def per_run(
        self, top: str, name: str, schema: StructType, column: str | None
    ) -> DataFrame | None:
        """``<top>/<R>/<name>/`` of each committed run (``runs``) or audit (``audits``), with
        ``column`` set to the folder's name (None: the rows carry their run already)."""
        owners = self.committed if top == "runs" else self.audits
        parts = []
        for owner in owners:
            rel = f"{top}/{owner}/{name}"
            if self._has_parquet(rel):
                df = self.spark.read.schema(schema).parquet(self._uri(rel))
                parts.append(df if column is None else df.withColumn(column, F.lit(owner)))
        return functools.reduce(DataFrame.unionByName, parts) if parts else None

    def audit_log(self) -> DataFrame | None:
        rows = self._table("audit_log", AUDIT_LOG)
        if rows is None:
            return None
        writers = last_writers(self.manifests, self.order)
        by_partition = self.spark.createDataFrame(
            [(t, d, r) for (t, d), r in writers.items()],
            StructType(
                [
                    StructField("topic", StringType(), False),
                    StructField("date", DateType(), False),
                    StructField("run_id", StringType(), False),
                ]
            ),
        )
        return rows.join(by_partition, on=["topic", "date"], how="left").withColumn(
            "run_id", F.coalesce(F.col("run_id"), F.lit(UNKNOWN_RUN))
        )
