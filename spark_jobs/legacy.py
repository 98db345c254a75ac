"""The one-time conversion of a warehouse the hand-written Parquet layouts left behind into the
Iceberg tables (``spark_jobs.warehouse.layout``), run when asked: ``auditsync pipeline
convert``. A run never converts: ``tables.attach`` refuses an old layout with one line naming
that command (``spark_jobs.common.old_layout``, which also says what an old layout looks
like). The old layouts lived on one local filesystem that the driver and the executors share,
so only a local warehouse is looked at.

Layout 2 (the incremental pipeline before Iceberg, marked by ``_layout.json`` {"version": 2,
"id"}): every committed batch, verdict and audit-log row (``spark_jobs.old_warehouse`` says
which) is appended to its table as it is, the deliveries with ``batch`` from the file name and
the newest commit record as compact's state (so the next compact continues after the same
landing segments); then PostgreSQL's runs of the old warehouse id are re-keyed to the catalog
name (``reconcile_runs.warehouse``), so the next run judges only what is new.

Layout 1 (the full-rebuild pipeline: ``deliveries/`` by consumer only, no marker, no
incremental state): the audit log is converted; its deliveries and run outputs are not (the
landing zone is compacted afresh by the normal compact and the first run judges the whole
history), as the move from layout 1 to 2 did.

Crash-safe: each table's append is one Iceberg commit carrying ``auditsync.legacy = <old
id>``, and a table that has one is not appended again; the re-keying is idempotent; the old
folders move aside to ``<work>/legacy-layout<N>/`` last (the marker, or layout 1's
``deliveries/``, the very last), so a conversion killed anywhere finishes when the command runs
again. One message on stderr says what was converted and where the old files are. The tables'
history starts at the conversion (``spark_jobs.time_travel`` refuses a time before it).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.common import store
from spark_jobs.common.old_layout import MARKER, Found, detect
from spark_jobs.old_warehouse import OldWarehouse
from spark_jobs.warehouse import tables
from spark_jobs.warehouse.layout import LEGACY_PROPERTY, Layout
from spark_jobs.warehouse.schemas import DETAIL, LEFT, SUMMARY
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.storage import Storage
from watch_service.store import runs

# Moved aside in this order, the marker last (``deliveries.layout1`` is what the move from
# layout 1 to 2 left).
FOLDERS = ("deliveries.layout1", "audits", "runs", "ledger", "audit_log", "deliveries")


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
    wh = Warehouse.open(layout, database_url, spark=spark)
    old = OldWarehouse(spark, layout, house, found.old_id, database_url)
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
        summary = wh.snapshot_summary(name, done)
        if summary is None:
            rows = read()
            if rows is None:
                continue
            if name == "deliveries":
                done[tables.COMPACT_PROPERTY] = json.dumps(old.state, sort_keys=True)
            wh.append(name, rows, done)
            if hook:
                hook(f"legacy.{name}")
            summary = wh.snapshot_summary(name, done) or {}
        added[name] = int(summary.get("added-records", 0))
    moved = 0
    if found.old_id:
        with store.connect(database_url) as conn:
            runs.move_warehouse(conn, found.old_id, layout.catalog)
            # A run refuses an old layout, so the catalog's runs are all the old warehouse's.
            moved = len(runs.committed_runs(conn, layout.catalog))
    for name in (*FOLDERS, MARKER):
        if house.exists(name):
            house.move(name, f"{found.aside}/{name}")
            if hook:
                hook("legacy.moving")
    batch = wh.compact_state()["batch"] if found.version == 2 else 0
    text = message(layout, found, batch, added, moved)
    print(text, file=sys.stderr, flush=True)
    return text
