"""The warehouse's filesystem protocols without Spark: batch recovery after a crash between
moving files and committing, partition swaps recovered from either side, run retention, and
Spark's partition-folder escaping."""

from __future__ import annotations

import datetime as dt
import os

from spark_jobs import runner
from spark_jobs.common import batches, partitions, storage
from spark_jobs.layout import Layout

from ..support import unique


def test_an_uncommitted_batch_is_undone_and_a_committed_one_kept(tmp_path):
    deliveries, records = tmp_path / "deliveries", tmp_path / "deliveries" / "_batches"
    kept = deliveries / "consumer=c" / "topic=t" / "b00000001-part-0.parquet"
    moved = deliveries / "consumer=c" / "topic=t" / "b00000002-part-0.parquet"
    for f in (kept, moved):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x")
    storage.write_json(batches.record_path(records, 1), {"batch": 1, "consumers": {}, "files": []})
    storage.write_json(
        batches.record_path(records, 2, pending=True),
        {"files": [str(moved.relative_to(deliveries))]},
    )
    (deliveries / "_staging" / "b00000002").mkdir(parents=True)
    batches.recover(deliveries, records)
    assert kept.exists() and not moved.exists()
    assert sorted(os.listdir(records)) == ["b00000001.json"]
    assert not (deliveries / "_staging").exists()
    assert batches.latest(records)["batch"] == 1


def test_new_segments_follow_each_consumers_last_compacted_frame(tmp_path):
    for name in (
        "part-000000000001-000000000003.parquet",
        "part-000000000004-000000000009.parquet",
        ".tmp-part-000000000010-000000000011.parquet",
        "state.json",
    ):
        (tmp_path / "c").mkdir(exist_ok=True)
        (tmp_path / "c" / name).write_bytes(b"")
    state = {"consumers": {"c": {"segment_through": 3}}}
    assert [(s.first, s.last) for s in batches.new_segments(tmp_path, state)] == [(4, 9)]


def test_a_swap_interrupted_either_way_is_recovered(tmp_path):
    target, staged = tmp_path / "topic=t" / "date=d", tmp_path / "staged"
    target.mkdir(parents=True)
    (target / "old").write_text("old")
    os.rename(target, target.with_name(".retired-date=d"))  # crashed after moving aside
    storage.recover_swap(target)
    assert (target / "old").read_text() == "old"
    staged.mkdir()
    (staged / "new").write_text("new")
    storage.swap_in(staged, target)
    assert os.listdir(target) == ["new"] and not target.with_name(".retired-date=d").exists()


def test_partition_folders_escape_like_spark():
    assert (
        partitions.folder(topic="a/b:c=d", date=dt.date(2024, 1, 2))
        == "topic=a%2Fb%3Ac%3Dd/date=2024-01-02"
    )
    assert partitions.folder(topic="plain-topic_1.x") == "topic=plain-topic_1.x"


def test_retention_keeps_the_newest_runs(tmp_path, pg_url):
    layout = Layout(tmp_path, tmp_path / "work", "current")
    for n, run in enumerate(["r1", "r2", "r3", "r4", "current"]):
        folder = layout.runs / run
        folder.mkdir(parents=True)
        os.utime(folder, (1_000 + n, 1_000 + n))
    layout.marker.parent.mkdir(parents=True, exist_ok=True)
    storage.write_json(layout.marker, {"version": 2, "id": unique("w")})
    assert sorted(runner.prune_runs(layout, 2, pg_url)) == ["r1", "r2", "r3"]
    assert sorted(os.listdir(layout.runs)) == ["current", "r4"]
