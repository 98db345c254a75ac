"""A real Iceberg audit log for the signed-log tests, made with pyiceberg in the test
PostgreSQL's catalog (no JVM): the audit log's columns, partitioned by topic as the pipeline's
is, and rows of it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.storage import Storage

SCHEMA = pa.schema(
    [pa.field("topic", pa.string(), False), pa.field("seq", pa.int64(), False),
     pa.field("ts", pa.int64(), False), pa.field("tag", pa.string()), pa.field("node", pa.string()),
     pa.field("meta", pa.string()), pa.field("data", pa.string(), False),
     pa.field("data_sha256", pa.string(), False), pa.field("origin", pa.string(), False)]
)  # fmt: skip


def row(topic: str, seq: int, phase: str = "kept") -> dict:
    data = json.dumps({"n": seq, "phase": phase})
    return {"topic": topic, "seq": seq, "ts": 1764144000000 + seq, "tag": None, "node": None,
            "meta": None, "data": data, "data_sha256": hashlib.sha256(data.encode()).hexdigest(),
            "origin": "delivered"}  # fmt: skip


def audit_table(layout: Layout, pg_url: str, rows: list[dict]) -> Any:
    """The warehouse's audit log, created holding ``rows``."""
    catalog = readers.catalog(layout, pg_url)
    catalog.create_namespace("audit")
    location = Storage(layout.warehouse).uri("audit/audit_log")
    table = catalog.create_table("audit.audit_log", schema=SCHEMA, location=location)
    with table.update_spec() as spec:  # the topics are read from the partitions
        spec.add_identity("topic")
    table.append(pa.Table.from_pylist(rows, SCHEMA))
    return table


def go_check(tlogcheck: Path, request: dict) -> dict:
    done = subprocess.run(
        [str(tlogcheck)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)
