"""The warehouse as one object: a layout and its catalog, the only door to the Iceberg tables
(as pyiceberg's ``Table`` owns its commits). Steps, the runner, the run lifecycle and the
conversion of an old layout call its methods; none of them names a table, commits, reads a
snapshot or runs a maintenance procedure itself (``tests/project/test_layering.py``).

Writes go through Spark (``append``, ``replace_run``, ``merge``, ``maintain``), except
``delete_runs``, one pyiceberg commit per table, which needs no session. Metadata (current
snapshots, compact's state) is read through pyiceberg from the catalog row and the metadata
file, not by a Spark job over a metadata table (a second or more each).
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.common import local_rows, progress
from spark_jobs.warehouse import maintenance, readers, tables
from spark_jobs.warehouse.layout import NAMESPACE, Layout
from spark_jobs.warehouse.schemas import DETAIL, conform
from watch_service.storage import S3Config

MERGE_VIEW = "auditsync_merge_updates"


@dataclasses.dataclass(frozen=True)
class Warehouse:
    """``s3``: how pyiceberg reaches the tables' files (None: every location is local);
    ``spark``: the session Spark's reads and commits run in (None: pyiceberg only)."""

    layout: Layout
    database_url: str
    s3: S3Config | None = None
    spark: SparkSession | None = None

    @classmethod
    def open(
        cls,
        layout: Layout,
        database_url: str,
        s3: S3Config | None = None,
        spark: SparkSession | None = None,
    ) -> Warehouse:
        """The warehouse without touching it (no session settings, no table created)."""
        local = all(loc.is_local for loc in tables.locations(layout))
        return cls(layout, database_url, None if local else s3 or S3Config.from_env(), spark)

    @classmethod
    def attach(
        cls, spark: SparkSession, layout: Layout, database_url: str, s3: S3Config | None = None
    ) -> Warehouse:
        """The warehouse with its catalog configured in ``spark`` and its tables created (once
        per session; an old hand-written layout is refused: ``tables.attach``)."""
        tables.attach(spark, layout, database_url, s3)
        return cls.open(layout, database_url, s3, spark)

    def for_run(self, run_id: str) -> Warehouse:
        """The same warehouse for another run id (the full audit's re-judging run)."""
        layout = dataclasses.replace(self.layout, run_id=run_id)
        return dataclasses.replace(self, layout=layout)

    @property
    def session(self) -> SparkSession:
        if self.spark is None:
            raise RuntimeError("this Warehouse has no Spark session (Warehouse.attach gives one)")
        return self.spark

    # -- reads through Spark --------------------------------------------------------------------
    def read(self, name: str, snapshot: int | None = None) -> DataFrame:
        """The table now, or at ``snapshot``: a DataFrame is evaluated lazily, so one read
        again after a later commit to the same table must pin the snapshot it means."""
        if snapshot is None:
            return self.session.table(self.layout.table(name))
        return self.session.sql(
            f"SELECT * FROM {self.layout.table(name)} VERSION AS OF {int(snapshot)}"
        )

    def pinned(self, name: str) -> DataFrame:
        """The table as it is now, pinned to its current snapshot (no rows when it has none).
        For a DataFrame a step caches and then writes the same table under: Spark re-caches
        every cached plan that reads a table just written, with the new rows, and that entry no
        longer matches the DataFrame, whose ``unpersist`` then misses it (one leaked entry per
        run, measured)."""
        snapshot = self.snapshot(name)
        if snapshot is None:
            return local_rows.empty(self.session, tables.SCHEMAS[name][0])
        return self.read(name, snapshot)

    def run_rows(self, name: str, run_id: str, snapshot: int | None = None) -> DataFrame:
        """One run's rows of a run-partitioned table, in the table's schema."""
        return self.read(name, snapshot).filter(F.col(tables.run_column(name)) == run_id)

    def runs_rows(self, name: str, run_ids: list[str], pin: bool = False) -> DataFrame:
        """These runs' rows of a run-partitioned table; ``pin``: read through ``pinned``."""
        if not run_ids:
            return local_rows.empty(self.session, tables.SCHEMAS[name][0])
        rows = self.pinned(name) if pin else self.read(name)
        return rows.filter(F.col(tables.run_column(name)).isin(*run_ids))

    def run_details(self, run_ids: list[str]) -> DataFrame:
        """The detail of these runs (those whose rows still exist), with a ``run_id``."""
        return self.runs_rows("detail", run_ids).select(
            *[F.col(f.name) for f in DETAIL.fields], "run_id"
        )

    def partition_runs(self, name: str) -> set[str]:
        """The run ids a run-partitioned table holds partitions of (its partitions metadata
        table: no data file is read)."""
        column, table = tables.run_column(name), self.layout.table(name)
        rows = self.session.sql(
            f"SELECT DISTINCT partition.{column} AS run_id FROM {table}.partitions"
        )
        return {r["run_id"] for r in rows.collect()}

    # -- commits ----------------------------------------------------------------------------------
    def _writer(self, df: DataFrame, name: str, properties: Mapping[str, str]) -> Any:
        writer = conform(df, tables.SCHEMAS[name][0]).writeTo(self.layout.table(name))
        for key, value in properties.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        return writer

    def append(self, name: str, df: DataFrame, properties: Mapping[str, str]) -> None:
        """``df``'s rows appended, in one commit whose summary carries ``properties``."""
        self._writer(df, name, properties).append()

    def replace_run(self, name: str, run_id: str, df: DataFrame) -> None:
        """Make ``df`` the run's rows of a run-partitioned table, in one commit: an overwrite
        by the run's partition filter, which also empties the partition when ``df`` has no
        rows (so ``df`` is computed once, not first counted)."""
        column = tables.run_column(name)
        rows = df.withColumn(column, F.lit(run_id))
        writer = self._writer(rows, name, {tables.RUN_PROPERTY: run_id})
        writer.overwrite(F.col(column) == F.lit(run_id))

    def merge(self, name: str, updates: DataFrame, bounds: list[tuple[str, int, int]]) -> None:
        """``MERGE INTO`` the table on (topic, seq): each row of ``updates`` replaces the row
        with its key. ``bounds`` (topic, lo, hi inclusive), the updates' seq ranges, narrow the
        target's scan to the files that can hold them."""
        spark = self.session
        inside = " OR ".join(
            f"(t.topic = '{tables.quote(topic)}' AND t.seq BETWEEN {int(lo)} AND {int(hi)})"
            for topic, lo, hi in bounds
        )
        conform(updates, tables.SCHEMAS[name][0]).createOrReplaceTempView(MERGE_VIEW)
        try:
            spark.sql(
                f"MERGE INTO {self.layout.table(name)} t USING {MERGE_VIEW} s "
                f"ON t.topic = s.topic AND t.seq = s.seq AND ({inside}) "
                f"WHEN MATCHED THEN UPDATE SET *"
            )
        finally:
            spark.catalog.dropTempView(MERGE_VIEW)

    def delete_runs(self, run_ids: list[str], committed: set[str], names: tuple[str, ...]) -> None:
        """Delete these runs' partitions of ``names`` and of the ledger, the ``committed`` runs'
        ledger rows moved to ``tables.PRUNED_LEDGER`` (a crashed run's are never read, so they
        go); one pyiceberg commit per table, no Spark session; a table not created yet is
        skipped."""
        from pyiceberg.exceptions import NoSuchTableError

        def load(name: str) -> Any:
            try:
                return self.catalog().load_table(f"{NAMESPACE}.{name}")
            except NoSuchTableError:
                return None

        with warnings.catch_warnings():
            # A run that wrote no rows to a table (it failed first) has no partition there.
            warnings.filterwarnings("ignore", "Delete operation did not match any records")
            for name in names:
                if (table := load(name)) is not None:
                    table.delete(_among(tables.run_column(name), run_ids))
            if (ledger := load("ledger")) is not None:
                _move_ledger(ledger, run_ids, committed)

    # -- metadata, through pyiceberg ----------------------------------------------------------
    def catalog(self) -> Any:
        """The pyiceberg catalog of this warehouse (one per process and catalog)."""
        return readers.shared_catalog(self.layout.catalog, self.database_url, self.s3)

    def metadata(self, name: str) -> Any:
        """The table's current Iceberg metadata (what Spark sees too: its catalog cache is
        off)."""
        return self.catalog().load_table(f"{NAMESPACE}.{name}").metadata

    def holds_run(self, name: str, run_id: str) -> bool:
        """Whether the run's partition of a run-partitioned table holds a data file (its
        manifests planned through pyiceberg: no data file is read, no Spark job)."""
        from pyiceberg.expressions import EqualTo

        table = self.catalog().load_table(f"{NAMESPACE}.{name}")
        equal: Any = EqualTo
        files = table.scan(row_filter=equal(tables.run_column(name), run_id)).plan_files()
        return any(True for _ in files)

    def snapshot(self, name: str) -> int | None:
        """The table's current snapshot id (None: it has none)."""
        return self.metadata(name).current_snapshot_id

    def snapshots(self, names: tuple[str, ...]) -> dict[str, int]:
        """The current snapshot ids of those of ``names`` that have one."""
        out = {}
        for name in names:
            snap = self.snapshot(name)
            if snap is not None:
                out[name] = snap
        return out

    def compact_snapshot(self) -> dict[str, Any] | None:
        """The newest snapshot in the deliveries table's current history whose summary
        carries compact's state: ``{snapshot_id, committed_ms, state}``, or None."""
        from pyiceberg.table.snapshots import ancestors_of

        metadata = self.metadata("deliveries")
        for snap in ancestors_of(metadata.current_snapshot(), metadata):
            state = snap.summary.get(tables.COMPACT_PROPERTY) if snap.summary is not None else None
            if state is not None:
                return {
                    "snapshot_id": snap.snapshot_id,
                    "committed_ms": snap.timestamp_ms,
                    "state": state,
                }
        return None

    def batch_rows(self, first: int, through: int) -> int | None:
        """The rows compact committed in delivery batches ``first..through``, from its commits'
        summaries (``added-records``; no data file is read); None when a batch's commit is no
        longer in the table's history (expired) or does not say."""
        from pyiceberg.table.snapshots import ancestors_of

        if through < first:
            return 0
        metadata = self.metadata("deliveries")
        current = metadata.current_snapshot()
        found: dict[int, int] = {}
        for snap in [] if current is None else ancestors_of(current, metadata):
            summary = snap.summary
            state = summary.get(tables.COMPACT_PROPERTY) if summary is not None else None
            if summary is None or state is None:
                continue
            batch = int(json.loads(state)["batch"])
            if batch < first:
                break
            added = summary.get("added-records")
            if batch <= through and added is not None:
                found[batch] = int(added)
        return sum(found.values()) if len(found) == through - first + 1 else None

    def compact_state(self) -> dict:
        """The newest compact commit's cumulative state (batch, per-consumer progress)."""
        row = self.compact_snapshot()
        if row is None:
            return {"batch": 0, "consumers": {}}
        return json.loads(row["state"])

    def snapshot_summary(self, name: str, properties: Mapping[str, str]) -> dict[str, str] | None:
        """The summary of the newest snapshot in the table's current history that carries
        these summary properties (None: there is none)."""
        t = self.layout.table(name)
        matches = " ".join(
            f"AND s.summary['{tables.quote(k)}'] = '{tables.quote(v)}'"
            for k, v in properties.items()
        )
        row = self.session.sql(
            f"SELECT s.summary FROM {t}.snapshots s JOIN {t}.history h "
            f"ON s.snapshot_id = h.snapshot_id WHERE h.is_current_ancestor {matches} "
            f"ORDER BY h.made_current_at DESC LIMIT 1"
        ).first()
        return None if row is None else dict(row["summary"])

    # -- maintenance ------------------------------------------------------------------------------
    def _count(self, sql: str) -> int:
        row = self.session.sql(sql).first()
        return 0 if row is None else int(row[0])

    def _committed(self, name: str) -> dict[int, int]:
        table = self.layout.table(name)
        rows = self.session.sql(
            f"SELECT snapshot_id, unix_millis(committed_at) FROM {table}.snapshots"
        )
        return {int(r[0]): int(r[1]) for r in rows.collect()}

    def maintain(
        self,
        name: str,
        cutoff: int,
        referenced: set[int],
        target_file_mb: int,
        hook: Callable[[str], None] | None = None,
    ) -> dict[str, object]:
        """Iceberg's three procedures on one table, with the limits ``maintenance`` decides
        (small files rewritten, snapshots before the cutoff expired but for those runs
        reference and compact's, orphans removed); the table's figures."""
        spark, catalog = self.session, self.layout.catalog
        timer = progress.Timer()
        full, short = self.layout.table(name), f"{NAMESPACE}.{name}"
        files_before = self._count(f"SELECT count(*) FROM {full}.data_files")
        spark.sql(maintenance.rewrite_sql(catalog, short, target_file_mb)).collect()
        if hook:
            hook(f"maintenance.{name}.rewritten")
        compact = self.compact_snapshot() if name == "deliveries" else None
        committed = self._committed(name)
        expiry = maintenance.expiry(
            cutoff, committed, referenced, None if compact is None else int(compact["snapshot_id"])
        )
        spark.sql(maintenance.expire_sql(catalog, short, expiry.older_than_ms)).collect()
        expired = len(committed) - len(self._committed(name))
        orphans_before = maintenance.orphans_before(int(time.time() * 1000), cutoff)
        orphans = spark.sql(maintenance.orphans_sql(catalog, short, orphans_before)).collect()
        return {
            "files_before": files_before,
            "files_after": self._count(f"SELECT count(*) FROM {full}.data_files"),
            "snapshots_expired": expired,
            "orphans_removed": len(orphans),
            "kept_from": expiry.reason,
            "seconds": timer.seconds,
        }


def _move_ledger(table: Any, run_ids: list[str], committed: set[str]) -> None:
    """In one commit, delete these runs' ledger partitions and append the ``committed`` ones'
    rows to ``tables.PRUNED_LEDGER``. A re-run of a prune that committed this finds the
    partitions gone: nothing moves twice."""
    import pyarrow as pa

    column = tables.run_column("ledger")
    rows = None
    if committed:
        rows = table.scan(row_filter=_among(column, sorted(committed))).to_arrow()
    with table.transaction() as tx:
        tx.delete(_among(column, run_ids))
        if rows is not None and rows.num_rows:
            at = rows.schema.get_field_index(column)
            field = rows.schema.field(at)
            moved = pa.array([tables.PRUNED_LEDGER] * rows.num_rows, field.type)
            tx.append(rows.set_column(at, field, moved))


def _among(column: str, values: list[str]) -> Any:
    """pyiceberg's ``In(column, values)`` (its pydantic model misleads mypy about the
    signature)."""
    from pyiceberg.expressions import In

    among: Any = In
    return among(column, tuple(values))
