"""The pure and file-only parts of the legacy conversion, without a JVM: what an old warehouse
is (``legacy.detect``), which run last wrote each audit-log partition, compact's state from a
commit record, the roll-forward of a backfill that crashed mid-swap, and the message."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from spark_jobs import legacy
from spark_jobs.common.errors import WarehouseError
from spark_jobs.old_warehouse import compact_state, finish_swaps, last_writers, partition_key
from spark_jobs.warehouse.layout import Layout
from watch_service.storage import Location, Storage

pytestmark = pytest.mark.unit

D = dt.date(2024, 1, 2)


def test_detect_tells_the_layouts_apart(tmp_path: Path):
    house = Storage(Location.parse(tmp_path))
    assert legacy.detect(house) is None
    (tmp_path / "deliveries/consumer=c").mkdir(parents=True)
    assert legacy.detect(house) == legacy.Found(1, "")
    (tmp_path / "deliveries/_batches").mkdir()
    assert legacy.detect(house) == legacy.Found(2, "")
    (tmp_path / "_layout.json").write_text(json.dumps({"version": 2, "id": "abc"}))
    found = legacy.detect(house)
    assert found == legacy.Found(2, "abc") and (found.key, found.aside) == ("abc", "legacy-layout2")
    (tmp_path / "_layout.json").write_text(json.dumps({"version": 3, "id": "abc"}))
    with pytest.raises(WarehouseError, match="layout version 3"):
        legacy.detect(house)
    # An S3 warehouse is never looked at (no request is made: no endpoint is configured).
    assert legacy.detect(Storage(Location.parse("s3://bucket/wh"))) is None


def test_partition_folders_and_their_last_writer():
    assert partition_key("topic=a%3Ab/date=2024-01-02") == ("a:b", D)
    p1, p2, p3 = "topic=t/date=2024-01-02", "topic=u/date=2024-01-02", "topic=a%3Ab/date=2024-01-02"
    manifests = {
        "r1": {"batches": [1, 1], "audit_partitions": [p1, p2]},  # not in PostgreSQL
        "r2": {"batches": [2, 2], "audit_partitions": [p1, p3]},
        "r3": {"batches": [3, 2], "audit_partitions": [p2, p3]},  # read no new batch
        "r4": {"batches": [3, 2]},  # wrote nothing
    }
    t = dt.datetime(2024, 1, 2, tzinfo=dt.UTC)
    order = {"r2": (2, t + dt.timedelta(minutes=15)), "r3": (2, t), "r4": (2, t)}
    # r3 and r2 both read through batch 2; PostgreSQL recorded r3 first.
    assert last_writers(manifests, order) == {("t", D): "r2", ("u", D): "r3", ("a:b", D): "r2"}


def test_compact_state_is_the_record_without_its_file_lists():
    record = {
        "batch": 7,
        "run_id": "r7",
        "consumers": {"c": {"segment_through": 9, "frame_no": 9, "frame_id": "x"}},
        "files": ["consumer=c/topic=t/b00000007-part-0.parquet"],
        "segments": {"c/part-000000000009-000000000009.parquet": [9, 9]},
    }
    assert compact_state(record) == {
        "batch": 7,
        "run_id": "r7",
        "consumers": {"c": {"segment_through": 9, "frame_no": 9, "frame_id": "x"}},
    }


def _part(folder: Path, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.parquet").write_text(text)


def test_a_crashed_swap_is_rolled_forward_from_its_journal(tmp_path: Path):
    log = tmp_path / "audit_log"
    _part(log / "_staging/r9/topic=t/date=2024-01-01", "new 1")  # not swapped in yet
    _part(log / "topic=t/date=2024-01-01", "old 1")
    _part(log / "topic=t/date=2024-01-02", "new 2")  # swapped in, the retired copy left
    _part(log / "topic=t/.retired-date=2024-01-02", "old 2")
    _part(log / "topic=t/.retired-date=2024-01-03", "old 3")  # moved aside, staging lost
    folders = [f"topic=t/date=2024-01-0{n}" for n in (1, 2, 3)]
    (log / "_swaps").mkdir()
    (log / "_swaps/r9.json").write_text(json.dumps({"staged": "/elsewhere", "folders": folders}))
    finish_swaps(Storage(Location.parse(tmp_path)))
    contents = {
        str(p.relative_to(log)): p.read_text()
        for p in log.rglob("*.parquet")
        if not p.relative_to(log).parts[0].startswith("_")
    }
    assert contents == {
        "topic=t/date=2024-01-01/part-0.parquet": "new 1",
        "topic=t/date=2024-01-02/part-0.parquet": "new 2",
        "topic=t/date=2024-01-03/part-0.parquet": "old 3",
    }
    assert not (log / "_swaps/r9.json").exists()


def test_the_message_says_what_was_kept_and_where_the_old_files_are(tmp_path: Path):
    layout = Layout("", str(tmp_path), "r")
    two = legacy.message(layout, legacy.Found(2, "abc"), 5, {"deliveries": 10, "ledger": 0}, 3)
    assert two == (
        f"[pipeline] {tmp_path.as_uri()} was a layout-2 warehouse (hand-written Parquet): "
        f"converted once into the Iceberg tables of catalog {layout.catalog} (rows: deliveries "
        f"10, ledger 0). Delivery batches 1..5 are kept (compact continues after them); "
        f"PostgreSQL's 3 reconcile run(s) of warehouse abc are now keyed {layout.catalog}, so "
        f"the next run judges only what is new. The old files are in "
        f"{(tmp_path / 'legacy-layout2').as_uri()}; nothing reads them any more: delete them "
        f"when satisfied."
    )
    one = legacy.message(layout, legacy.Found(1, ""), 0, {"audit_log": 4}, 0)
    assert "layout-1 warehouse" in one and "(rows: audit_log 4)" in one
    assert "compacted afresh" in one and "legacy-layout1" in one
