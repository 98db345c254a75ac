"""A tiny warehouse written through the jobs' own table module: ``appends`` one-row commits to
the audit log (one topic+seq each, topics alternating), a pipeline run recorded after each
commit with the snapshot it left (as ``store.record_snapshots`` does), and two compact-like
commits to the deliveries table carrying ``auditsync.compact``. Shared by the maintenance and
time-travel tests."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import psycopg

from spark_jobs.common import plan_size
from spark_jobs.warehouse import readers, tables
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.warehouse import Warehouse as House
from watch_service.store import runs

DAY = dt.date(2026, 11, 26)
NO_DISTRIBUTION = "spark.sql.iceberg.distribution-mode"
TS0 = int(dt.datetime(2026, 11, 26, 8, tzinfo=dt.UTC).timestamp() * 1000)


@dataclasses.dataclass
class Warehouse:
    layout: Layout
    topics: tuple[str, str]
    run_ids: list[str]  # run_ids[i] left the audit log at snapshots[i] (i + 1 rows)
    snapshots: list[int]
    compact_state: dict


def audit_row(topic: str, seq: int, run_id: str) -> tuple:
    data = json.dumps({"n": seq, "text": f"record <{seq}> of {topic} " + "x" * 40})
    return (topic, seq, TS0 + seq, None, None, None, data, "0" * 64, "delivered", DAY, run_id)


def delivery_row(consumer: str, frame_no: int, batch: int) -> tuple:
    row = {
        "consumer": consumer,
        "frame_no": frame_no,
        "received_ms": TS0,
        "kind": "record",
        "topic": "t",
        "seq": frame_no,
        "batch": batch,
    }
    return tuple(row.get(f.name) for f in tables.SCHEMAS["deliveries"][0].fields)


def build(spark, pg_url: str, work: str, appends: int, prefix: str) -> Warehouse:
    layout = Layout("", work, "")
    wh = House.attach(spark, layout, pg_url)
    topics = (f"{prefix}-a", f"{prefix}-b")
    schema = tables.SCHEMAS["audit_log"][0]
    run_ids = []
    # One-row commits: one task, so no distribution (sampling, shuffle) is needed for the
    # same files, and skipping it halves a commit's time.
    with plan_size.settings(spark, {NO_DISTRIBUTION: "none"}):
        for i in range(appends):
            run_id = f"{prefix}-run-{i:03d}"
            row = audit_row(topics[i % 2], i // 2 + 1, run_id)
            df = spark.createDataFrame([row], schema)
            wh.append("audit_log", df, {tables.RUN_PROPERTY: run_id})
            run_ids.append(run_id)
    snapshots = [e.snapshot_id for e in readers.load(layout, pg_url, "audit_log").history()]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for run_id, snap in zip(run_ids, snapshots):
            runs.start_run(conn, run_id)
            runs.record_snapshots(conn, run_id, layout.catalog, {"audit_log": snap})
    state: dict = {}
    for batch in (1, 2):
        state = {"batch": batch, "consumers": {"c1": {"segment_through": batch}}}
        wh.append(
            "deliveries",
            spark.createDataFrame(
                [delivery_row("c1", batch, batch)], tables.SCHEMAS["deliveries"][0]
            ),
            {tables.COMPACT_PROPERTY: json.dumps(state, sort_keys=True)},
        )
    return Warehouse(layout, topics, run_ids, snapshots, state)


def plugin_client(pg_url: str, gx_root, work: str):
    """The plugin's FastAPI app over Starlette's test client, login replaced, on this
    database and warehouse."""
    from fastapi.testclient import TestClient
    from psycopg.conninfo import conninfo_to_dict

    from auditsync_plugin.ui.app import create_app

    app = create_app(
        conninfo=lambda: conninfo_to_dict(pg_url),
        gx_root=lambda: gx_root,
        auth=lambda: None,
        landing=lambda: None,
        warehouse=lambda: work,
    )
    return TestClient(app)
