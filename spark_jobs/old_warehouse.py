"""The committed contents of a warehouse in the hand-written Parquet layouts (1 and 2), read
by Spark for ``spark_jobs.legacy``'s one-time conversion. What counts as committed is what the
old pipeline's own readers saw:

- deliveries: batch N's files ``deliveries/consumer=C/topic=T/bNNNNNNNN-*.parquet`` once its
  record ``deliveries/_batches/bNNNNNNNN.json`` exists. Batches committed in order and a
  crashed one was redone under its own number, so the files of batches up to the newest record
  are exactly the committed rows (a crashed batch N+1's files are not). The newest record is
  compact's cumulative state.
- runs ``runs/R/`` and the ledger ``ledger/run=R/``: of runs PostgreSQL recorded for the old
  warehouse id or that wrote ``runs/R/manifest.json`` (after their commit); a crashed run's
  leftovers are not verdicts. Full audits: ``audits/A/``.
- the audit log ``audit_log/topic=T/date=D/``, after rolling forward a backfill that crashed
  while swapping partitions in (its journal ``audit_log/_swaps/R.json``, as the old writer
  did before each write). A row's ``run_id`` is the run whose manifest last lists its
  partition (backfill rewrote whole partitions), else ``legacy``.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, StructField, StructType

from spark_jobs.common import local_rows, store
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.schemas import AUDIT_LOG, DELIVERIES, LEDGER
from watch_service.storage import Storage
from watch_service.store import runs

UNKNOWN_RUN = "legacy"
RECORD_RE = re.compile(r"b(\d{8})\.json")
FILE_BATCH_RE = r"^b(\d{8})-"


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


def finish_swaps(house: Storage) -> None:
    """Finish the audit-log partition swaps a crashed backfill journaled: each listed partition
    gets its staged folder, or its retired (``.retired-``) one back (the old writer's
    ``recover``). Nothing to do without a journal."""
    for name, _ in house.files("audit_log/_swaps"):
        journal = json.loads(house.read_bytes(f"audit_log/_swaps/{name}") or b"{}")
        staged = f"audit_log/_staging/{name.removesuffix('.json')}"
        for rel in journal.get("folders", []):
            target = f"audit_log/{rel}"
            parent, leaf = target.rsplit("/", 1)
            retired = f"{parent}/.retired-{leaf}"
            if house.exists(f"{staged}/{rel}"):
                house.delete_tree(retired)
                if house.exists(target):
                    house.move(target, retired)
                house.move(f"{staged}/{rel}", target)
                house.delete_tree(retired)
            elif house.exists(retired):
                if house.exists(target):
                    house.delete_tree(retired)
                else:
                    house.move(retired, target)
        house.delete(f"audit_log/_swaps/{name}")


class OldWarehouse:
    """An old warehouse's committed contents, read by Spark (each table on demand)."""

    def __init__(
        self, spark: SparkSession, layout: Layout, house: Storage, old_id: str, url: str
    ) -> None:
        self.spark, self.layout, self.house = spark, layout, house
        order: dict[str, tuple[int, object]] = {}
        if old_id:
            with store.connect(url) as conn:
                order = runs.run_order(conn, old_id)
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
        finish_swaps(self.house)
        rows = self._table("audit_log", AUDIT_LOG)
        if rows is None:
            return None
        writers = last_writers(self.manifests, self.order)
        by_partition = local_rows.frame(
            self.spark,
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
