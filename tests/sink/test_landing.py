"""A consumer's landing and its durability rules, on a local folder and on a real S3 server:
crash windows, temp files, fault decisions as whole objects, the consumer lock."""

import datetime as dt

import psycopg
import pytest

from watch_service.protocol.landing import COLUMN_NAMES
from watch_service.sink.landing import (
    SCHEMA,
    Landing,
    LandingError,
    SinkState,
    faults_name,
    rows_table,
    segment_name,
)
from watch_service.storage import TMP_PREFIX, Storage

from ..support import ON_BOTH_STORAGES, ON_S3

pytestmark = pytest.mark.pg
NOW = dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC)
FOLDER = "2026-01-02/03"  # where segments written at NOW go


def row(frame_no: int, seq: int) -> tuple:
    values = {
        "consumer": "c",
        "frame_no": frame_no,
        "received_ms": 1,
        "kind": "record",
        "topic": "a",
        "seq": seq,
        "data": "{}",
    }
    return tuple(values.get(c) for c in COLUMN_NAMES)


@pytest.fixture
def lock_url(landing_location: Storage, request) -> str | None:
    """An object-store consumer is locked in PostgreSQL; a local one by flock."""
    return None if landing_location.location.is_local else request.getfixturevalue("pg_url")


@pytest.fixture
def landing(landing_location, lock_url):
    land = Landing(landing_location, "c", lock_url, clock=lambda: NOW)
    land.open()
    yield land
    land.close()


@ON_BOTH_STORAGES
def test_segment_has_the_landing_schema_and_a_resume_footer(landing):
    name = landing.write_segment([row(1, 1), row(2, 2)], 1, 2, "id-2", {"a": 2})
    assert name == segment_name(1, 2, FOLDER) == f"{FOLDER}/part-000000000001-000000000002.parquet"
    assert [s.name for s in landing.segments()] == [name]
    table = landing.store.read_parquet(name)
    assert table.schema.remove_metadata() == SCHEMA and table.column("seq").to_pylist() == [1, 2]
    assert landing.segment_footer(name) == {
        "first_frame_no": 1,
        "last_frame_no": 2,
        "last_frame_id": "id-2",
        "cursors": {"a": 2},
    }
    assert landing.segment_index_ops(name) == [
        ("a", 1, None, None, "{}"),
        ("a", 2, None, None, "{}"),
    ]
    with pytest.raises(LandingError, match="never repeat"):
        landing.write_segment([], 1, 2, "id-2", {})


@ON_BOTH_STORAGES
def test_crash_after_segment_before_state_resumes_from_the_newest_footer(landing):
    landing.save_state(SinkState(wid="w", last_id="id-1", frame_no=1, cursors={"a": 1, "b": 4}))
    # A footer holds the spool's whole cursor map (lower only where a rewound frame moved one).
    landing.write_segment([row(2, 2)], 2, 3, "id-3", {"a": 3, "b": 4})
    landing.write_segment([row(4, 4)], 4, 5, "id-5", {"a": 5, "b": 4})
    # (crash: state.json still says frame 1)
    state = landing.load_state()
    assert (state.wid, state.frame_no, state.last_id) == ("w", 5, "id-5")
    assert state.cursors == {"a": 5, "b": 4}
    names = [name for name, _ in landing.store.files(recursive=True)]
    assert names == [segment_name(2, 3, FOLDER), segment_name(4, 5, FOLDER), "state.json"]


def test_state_is_replaced_atomically_and_temp_files_are_cleared(landing_location):
    first = Landing(landing_location, "c")
    first.open()
    first.save_state(SinkState(wid="w1", frame_no=5))
    folder = first.store.location.local_path()
    (folder / f"{TMP_PREFIX}state.json").write_bytes(b'{"wid": "half')  # crash mid-write
    (folder / f"{TMP_PREFIX}{segment_name(6, 9)}").write_bytes(b"PAR1")
    first.close()
    again = Landing(landing_location, "c")
    again.open()
    assert again.load_state().wid == "w1" and again.load_state().frame_no == 5
    assert not list(folder.glob(f"{TMP_PREFIX}*")) and again.segments() == []
    again.close()


@ON_BOTH_STORAGES
def test_unreadable_state_is_refused_by_name(landing):
    landing.store.write_bytes("state.json", b"{not json")
    with pytest.raises(LandingError, match=r"/c/state.json: unreadable sink state"):
        landing.load_state()


@ON_BOTH_STORAGES
def test_fault_decisions_are_whole_objects_loaded_together(landing):
    landing.write_faults([("drop", "a", 1), ("corrupt", "a", 2)], 1, 4)
    landing.write_faults([("drop", "b", 7)], 5, 5)
    assert landing.store.files("faults") == [
        ("part-000000000001-000000000004.jsonl", 75),
        ("part-000000000005-000000000005.jsonl", 36),
    ]
    assert landing.load_faults() == {("drop", "a", 1), ("corrupt", "a", 2), ("drop", "b", 7)}
    # a crash before segment 5-5: the re-delivered frames get the same numbers, and the
    # decisions written for them again keep the earlier ones
    landing.write_faults([("drop", "b", 9)], 5, 5)
    assert landing.store.read_bytes(faults_name(5, 5)) == (
        b'{"kind":"drop","topic":"b","seq":7}\n{"kind":"drop","topic":"b","seq":9}\n'
    )
    assert len(landing.load_faults()) == 4


def test_one_sink_per_local_consumer(landing, landing_location):
    with pytest.raises(
        LandingError, match=r"^file:///.*/c: another sink holds this consumer's lock$"
    ):
        Landing(landing_location, "c").open()
    other = Landing(landing_location, "d")
    other.open()
    other.close()


@ON_S3
def test_one_sink_per_s3_consumer(landing, landing_location, pg_url):
    uri = landing_location.uri("c")
    with pytest.raises(
        LandingError,
        match=rf"^{uri}: another sink holds this consumer's lock \(a PostgreSQL advisory lock, "
        r"still held after 2s\)$",
    ):
        Landing(landing_location, "c", pg_url).open()
    with pytest.raises(LandingError, match=rf"^{uri}: an object store has no file locks"):
        Landing(landing_location, "c").open()
    other = Landing(landing_location, "d", pg_url)  # another consumer: its own lock
    other.open()
    other.close()
    landing.close()  # the lock goes with the session that held it
    again = Landing(landing_location, "c", pg_url)
    again.open()
    with pytest.raises(LandingError, match="not open"):
        landing.write_segment([], 1, 1, "id-1", {})
    with psycopg.connect(pg_url, autocommit=True) as admin:  # the lock's session ends
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"auditsync sink {uri}"[:63],),
        )
    with pytest.raises(LandingError, match=rf"^{uri}: lost the consumer lock \(its PostgreSQL"):
        again.write_segment([row(1, 1)], 1, 1, "id-1", {"a": 1})
    assert again.segments() == []  # nothing written unguarded
    again.close()


@ON_BOTH_STORAGES
def test_segments_go_to_dated_folders_that_never_go_back(landing_location, lock_url):
    times = iter(
        [NOW, NOW + dt.timedelta(hours=2), NOW + dt.timedelta(hours=1)]  # the clock steps back
    )
    old = landing_location.child("c")
    old.write_parquet(segment_name(1, 1), rows_table([row(1, 1)]))
    land = Landing(landing_location, "c", lock_url, clock=lambda: next(times))
    land.open()
    try:
        names = [land.write_segment([row(f, f)], f, f, f"id-{f}", {"a": f}) for f in (2, 3, 4)]
        assert names == [
            segment_name(2, 2, "2026-01-02/03"),
            segment_name(3, 3, "2026-01-02/05"),
            segment_name(4, 4, "2026-01-02/05"),
        ]
        # an earlier sink's root-level segment comes first; the newest is found in 3 listings
        assert [s.name for s in land.segments()] == [segment_name(1, 1), *names]
        assert land.load_state().frame_no == 4
    finally:
        land.close()
    again = Landing(landing_location, "c", lock_url, clock=lambda: NOW)  # restarted, clock back
    again.open()
    try:
        assert again.write_segment([row(5, 5)], 5, 5, "id-5", {}) == segment_name(
            5, 5, "2026-01-02/05"
        )
        assert [s.last_frame_no for s in again.segments_after(3)] == [4, 5]
    finally:
        again.close()


def test_a_temp_file_left_in_a_dated_folder_is_cleared(landing_location):
    first = Landing(landing_location, "c", clock=lambda: NOW)
    first.open()
    first.write_segment([row(1, 1)], 1, 1, "id-1", {})
    first.close()
    later = landing_location.child("c").location.local_path() / "2026-01-02/04"
    later.mkdir(parents=True)
    (later / f"{TMP_PREFIX}{segment_name(2, 2)}").write_bytes(b"PAR1")  # crash mid-write
    again = Landing(landing_location, "c")
    again.open()
    assert list(later.iterdir()) == []
    again.close()
