"""The consumer folder's durability rules, exercised on a temp folder: crash windows, temp
files, torn fault-log lines, the lock."""

import pyarrow.parquet as pq
import pytest

from watch_service.protocol.landing import COLUMN_NAMES
from watch_service.sink.durable import TMP_PREFIX
from watch_service.sink.landing import (
    SCHEMA,
    Landing,
    LandingError,
    SinkState,
    segment_name,
)

pytestmark = pytest.mark.unit


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
def landing(tmp_path):
    land = Landing(tmp_path, "c")
    land.open()
    yield land
    land.close()


def test_segment_has_the_landing_schema_and_a_resume_footer(landing):
    path = landing.write_segment([row(1, 1), row(2, 2)], 1, 2, "id-2", {"a": 2})
    assert path.name == segment_name(1, 2) == "part-000000000001-000000000002.parquet"
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == SCHEMA and table.column("seq").to_pylist() == [1, 2]
    assert landing.segment_footer(path) == {
        "first_frame_no": 1,
        "last_frame_no": 2,
        "last_frame_id": "id-2",
        "cursors": {"a": 2},
    }
    assert landing.segment_index_ops(path) == [
        ("a", 1, None, None, "{}"),
        ("a", 2, None, None, "{}"),
    ]
    with pytest.raises(LandingError, match="never repeat"):
        landing.write_segment([], 1, 2, "id-2", {})


def test_crash_after_segment_before_state_resumes_from_the_segment(landing):
    landing.save_state(SinkState(wid="w", last_id="id-1", frame_no=1, cursors={"a": 1}))
    landing.write_segment([row(2, 2)], 2, 3, "id-3", {"a": 3})
    # (crash: state.json still says frame 1)
    state = landing.load_state()
    assert (state.wid, state.frame_no, state.last_id, state.cursors) == ("w", 3, "id-3", {"a": 3})


def test_state_is_replaced_atomically_and_temp_files_are_cleared(tmp_path):
    first = Landing(tmp_path, "c")
    first.open()
    first.save_state(SinkState(wid="w1", frame_no=5))
    (first.dir / f"{TMP_PREFIX}state.json").write_bytes(b'{"wid": "half')  # crash mid-write
    (first.dir / f"{TMP_PREFIX}{segment_name(6, 9)}").write_bytes(b"PAR1")
    first.close()
    again = Landing(tmp_path, "c")
    again.open()
    assert again.load_state().wid == "w1" and again.load_state().frame_no == 5
    assert not list(again.dir.glob(f"{TMP_PREFIX}*")) and again.segments() == []
    again.close()


def test_unreadable_state_is_refused_by_name(landing):
    (landing.dir / "state.json").write_bytes(b"{not json")
    with pytest.raises(LandingError, match="state.json"):
        landing.load_state()


def test_fault_log_dedupes_and_repairs_a_torn_line(landing):
    landing.append_faults([("drop", "a", 1), ("corrupt", "a", 2)])
    landing.append_faults([("drop", "a", 1)])
    with open(landing.dir / "faults.jsonl", "ab") as f:
        f.write(b'{"kind":"drop","topic":"a","se')  # crash mid-append
    assert landing.load_faults() == {("drop", "a", 1), ("corrupt", "a", 2)}
    landing.append_faults([("drop", "b", 7)])
    assert landing.load_faults() == {("drop", "a", 1), ("corrupt", "a", 2), ("drop", "b", 7)}


def test_one_sink_per_consumer(landing, tmp_path):
    with pytest.raises(LandingError, match="lock"):
        Landing(tmp_path, "c").open()
    other = Landing(tmp_path, "d")
    other.open()
    other.close()
