"""Landing retention: the plan (pure: exact kept and deleted names) and its deletes on a local
folder and on the tests' S3 server (``spark_jobs.steps.maintenance.landing_plan`` / ``landing``)."""

import datetime as dt

import pyarrow as pa
import pytest

from spark_jobs.steps.maintenance import landing as retention
from spark_jobs.steps.maintenance import landing_plan as lp
from tests.support import ON_BOTH_STORAGES
from watch_service.protocol.landing_keys import SegmentKey, segment_key, segments_since

NOW = dt.datetime(2026, 1, 10, 12, 30, tzinfo=dt.UTC)
CUTOFF = NOW - dt.timedelta(hours=48)  # 2026-01-08 12:30


@pytest.mark.unit
@pytest.mark.parametrize(
    "raw, hours",
    [(None, 168.0), ("", 168.0), ("0", 0.0), ("2.5", 2.5), ("168", 168.0)],
)
def test_the_setting(raw, hours):
    assert lp.retention_hours(raw) == hours


@pytest.mark.unit
@pytest.mark.parametrize("raw", ["-1", "seven", "nan", "inf"])
def test_a_bad_setting_is_named(raw):
    with pytest.raises(lp.RetentionSettingError) as err:
        lp.retention_hours(raw)
    assert str(err.value) == (
        f"AUDITSYNC_LANDING_RETENTION_HOURS={raw!r}: expected a number of hours >= 0 (default 168)"
    )


@pytest.mark.unit
def test_verified_positions_come_from_passed_runs_and_failed_runs_hold_theirs():
    marks = lp.verified(
        [
            ("passed", {"consumed": {"c": [1, 10]}, "through": {"c": [10, "2026-01-07/00"]}}),
            ("failed", {"consumed": {"c": [11, 20]}, "through": {"c": [20, "2026-01-07/05"]}}),
            ("passed", {"consumed": {"c": [21, 30]}, "through": {"c": [30, "2026-01-08/03"]}}),
            ("running", {"consumed": {"c": [31, 35]}, "through": {"c": [35, "2026-01-09/00"]}}),
            ("passed", {"consumed": {}, "through": {"d": [4, ""]}}),  # legacy root only
            ("passed", None),  # a run whose compact recorded nothing
            ("passed", {"seconds": 1.0}),  # an older compact's figures: no positions
        ]
    )
    assert marks == {
        "c": lp.Verified(30, "2026-01-08/03", ((11, 20), (31, 35))),
        "d": lp.Verified(4, ""),
    }


@pytest.mark.unit
def test_the_plan_deletes_exactly_the_verified_and_old():
    mark = lp.Verified(30, "2026-01-08/11", ((11, 20),))
    keys = [
        SegmentKey("", 1, 2, modified=(CUTOFF - dt.timedelta(hours=1)).timestamp()),
        SegmentKey("", 3, 4, modified=(CUTOFF + dt.timedelta(hours=1)).timestamp()),  # recent
        SegmentKey("2026-01-08/10", 5, 10),  # ended 11:00 <= 12:30
        SegmentKey("2026-01-08/10", 11, 12),  # a failed run's
        SegmentKey("2026-01-08/11", 13, 21),  # overlaps the failed run's frames
        SegmentKey("2026-01-08/11", 22, 30),  # ended 12:00
        SegmentKey("2026-01-08/12", 31, 31),  # not verified (and ends 13:00 > 12:30)
    ]
    got = {k.name: lp.expired(k, mark, CUTOFF) for k in keys}
    assert got == {
        "part-000000000001-000000000002.parquet": True,
        "part-000000000003-000000000004.parquet": False,
        "2026-01-08/10/part-000000000005-000000000010.parquet": True,
        "2026-01-08/10/part-000000000011-000000000012.parquet": False,
        "2026-01-08/11/part-000000000013-000000000021.parquet": False,
        "2026-01-08/11/part-000000000022-000000000030.parquet": True,
        "2026-01-08/12/part-000000000031-000000000031.parquet": False,
    }
    whole = lp.plan_folder("2026-01-08/09", [SegmentKey("2026-01-08/09", 1, 2)], 0, mark, CUTOFF)
    assert whole == lp.FolderPlan(
        "2026-01-08/09", ("2026-01-08/09/part-000000000001-000000000002.parquet",), (), True
    )
    # the verified folder itself is never removed whole: the sink may still write into it
    last = lp.plan_folder("2026-01-08/11", [SegmentKey("2026-01-08/11", 22, 30)], 0, mark, CUTOFF)
    assert last.delete and not last.whole
    # a file that is not a segment keeps its folder
    assert not lp.plan_folder("2026-01-08/09", [], 1, mark, CUTOFF).whole


@pytest.mark.unit
def test_only_folders_that_may_expire_are_listed():
    mark = lp.Verified(30, "2026-01-09/05")
    assert [
        d for d in ("2026-01-07", "2026-01-08", "2026-01-09") if lp.day_may_expire(d, mark, CUTOFF)
    ] == ["2026-01-07", "2026-01-08"]
    assert [
        h
        for h in ("2026-01-08/10", "2026-01-08/11", "2026-01-08/12")
        if lp.hour_may_expire(h, mark, CUTOFF)
    ] == ["2026-01-08/10", "2026-01-08/11"]
    early = lp.Verified(30, "2026-01-07/03")
    assert not lp.day_may_expire("2026-01-08", early, CUTOFF)
    assert not lp.hour_may_expire("2026-01-07/04", early, CUTOFF)


def _segment(store, name: str) -> None:
    store.write_parquet(name, pa.table({"frame_no": pa.array([1], pa.int64())}))


@pytest.mark.pg
@ON_BOTH_STORAGES
def test_retention_deletes_on_both_storages(landing_location):
    c = landing_location.child("c")
    names = [
        segment_key("", 1, 1),
        segment_key("2026-01-07/23", 2, 3),
        segment_key("2026-01-08/00", 4, 5),
        segment_key("2026-01-08/00", 6, 6),  # a failed run's
        segment_key("2026-01-08/11", 7, 8),
        segment_key("2026-01-08/12", 9, 9),  # ends 13:00, after the cutoff
        segment_key("2026-01-08/13", 10, 10),  # not verified
    ]
    for name in names:
        _segment(c, name)
    c.write_bytes("state.json", b"{}")
    c.write_bytes("faults/part-000000000002-000000000003.jsonl", b"")
    _segment(landing_location.child("other"), segment_key("2026-01-01/00", 1, 1))  # no run
    marks = {"c": lp.Verified(9, "2026-01-08/12", ((6, 6),))}
    # the root segment was written just now: only its modified time can age it
    figures = retention.expire(landing_location, marks, 48, NOW)
    assert {k: figures[k] for k in ("consumers", "deleted", "kept", "folders_removed")} == {
        "consumers": 1,
        "deleted": 3,
        "kept": 2,  # of those listed: the root segment (recent) and the failed run's
        "folders_removed": 2,
    }
    # listings: the landing, c's root, 2 days, 3 hours (never 2026-01-08/12 nor /13)
    assert figures["listings"] == 7
    kept = [k.name for k in segments_since(c.listing)]
    assert kept == [
        segment_key("", 1, 1),
        segment_key("2026-01-08/00", 6, 6),
        segment_key("2026-01-08/12", 9, 9),
        segment_key("2026-01-08/13", 10, 10),
    ]
    assert c.folders() == ["2026-01-08", "faults"]
    assert c.folders("2026-01-08") == ["00", "12", "13"]
    assert [n for n, _ in c.files("faults")] == ["part-000000000002-000000000003.jsonl"]
    assert [n for n, _ in landing_location.files("other", recursive=True)] == [
        segment_key("2026-01-01/00", 1, 1)
    ]
    # a later pass with no retention: what is verified goes; the failed run's and the
    # unverified stay
    again = retention.expire(landing_location, marks, 0, dt.datetime.now(dt.UTC))
    assert again["deleted"] == 2
    assert [k.name for k in segments_since(c.listing)] == [
        segment_key("2026-01-08/00", 6, 6),
        segment_key("2026-01-08/13", 10, 10),
    ]


@pytest.mark.unit
def test_the_command_names_a_bad_setting_and_location(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("AUDITSYNC_LANDING_RETENTION_HOURS", "-3")
    assert retention.main(["--landing", str(tmp_path), "--work", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "[landing retention] AUDITSYNC_LANDING_RETENTION_HOURS='-3': expected a number of "
        "hours >= 0 (default 168)\n"
    )
    monkeypatch.setenv("AUDITSYNC_DATABASE_URL", "postgresql://x@127.0.0.1:1/x")
    assert retention.main(["--landing", "gs://x", "--work", "w", "--retention-hours", "1"]) == 2
    assert capsys.readouterr().err.startswith("[landing retention] unsupported location 'gs://x'")
