"""The composite id as the sink reads it (the shared protocol.cursor), backoff and the
watchdog, progress lines, flag validation."""

import argparse

import pytest

from watch_service.protocol import cursor as cursor_codec
from watch_service.sink.backoff import backoff_ms, watchdog_s
from watch_service.sink.config import ConfigError, build_parser, config_from_args
from watch_service.sink.connection import WatchOptions, session_body
from watch_service.sink.progress import Stats, lags, progress_line
from watch_service.sink.rows import FrameContext, FrameError, advance, frame_rows, index_ops
from watch_service.storage import Location, S3Config
from watch_service.store.search_index import Rewound

pytestmark = pytest.mark.unit


def test_cursor_id_matches_the_seed_example():
    wire = "eyJvcmRlcnMiOjUyMTAsIm5vdGlmaWNhdGlvbnMiOjg4MTMwfQ"
    assert cursor_codec.decode(wire) == {"orders": 5210, "notifications": 88130}
    assert cursor_codec.encode({"orders": 5210, "notifications": 88130}) == wire


@pytest.mark.parametrize("cursors", [{}, {"a": 0}, {"a.b:c@d-e_f": 2**53, "z": 1}])
def test_cursor_id_round_trip_unpadded(cursors):
    encoded = cursor_codec.encode(cursors)
    assert "=" not in encoded and "+" not in encoded and "/" not in encoded
    assert cursor_codec.decode(encoded) == cursors


@pytest.mark.parametrize(
    "opaque",
    [
        "",
        "ckpt_123",
        "!!!",
        cursor_codec.encode({"a": -1}),
        "WzEsMl0",
        "eyJhIjp0cnVlfQ",
        "eyJhIjoiMSJ9",
    ],
)
def test_cursor_id_opaque_tokens_decode_to_none(opaque):
    assert cursor_codec.decode(opaque) is None


def test_backoff_grows_caps_and_jitters():
    assert backoff_ms(0, 2000, 30_000, 0.0) == 1000
    assert backoff_ms(0, 2000, 30_000, 0.999999) == pytest.approx(2000, abs=0.01)
    assert backoff_ms(2, 2000, 30_000, 0.5) == 6000
    assert backoff_ms(10, 2000, 30_000, 0.0) == 15_000
    assert backoff_ms(10_000, 2000, 30_000, 0.0) == 15_000
    assert backoff_ms(3, 0, 30_000, 0.7) == 0
    with pytest.raises(ValueError):
        backoff_ms(0, 2000, 30_000, 1.0)


def test_cursors_never_move_backwards_so_every_resent_record_counts():
    cursors = {"a": 100, "b": 7}
    assert advance(cursors, {"a": 50, "b": 9, "c": 0}) is True
    assert cursors == {"a": 100, "b": 9, "c": 0}
    assert advance(cursors, {"a": 100}) is False
    # A server re-sending 1..100 in frames of 25 after its restart: all 100 are duplicates.
    cursors, duplicates = {"a": 100}, 0
    for n, start in enumerate(range(1, 101, 25), 1):
        seqs = range(start, start + 25)
        payload = {"topic": "a", "records": [{"$seq": s, "data": s} for s in seqs]}
        frame_id = cursor_codec.encode({"a": seqs[-1]})
        landed = frame_rows("record", payload, FrameContext("c", None, n, frame_id, 0), cursors)
        duplicates += landed.duplicates
        advance(cursors, cursor_codec.decode(frame_id))
    assert duplicates == 100 and cursors == {"a": 100}


def test_a_rewound_frame_lands_its_exact_range_and_moves_its_cursor_back():
    frame_id = cursor_codec.encode({"a": 200, "b": 9})
    payload = {"topic": "a", "reason": "source_rewound", "gap_from": 201, "gap_to": 300}
    ctx = FrameContext("c", "n1", 7, frame_id, 1234)
    landed = frame_rows("rewound", {**payload, "head_seq": 200}, ctx, {"a": 300, "b": 9})
    assert landed.rows == [
        ("c", "n1", 7, frame_id, 1234, "rewound", "a", 200, None, None, None, None, None, None)
        + (None, "source_rewound", 201, 300, 200)
    ]
    assert (landed.cursor, landed.rewound, landed.head_seq) == (200, (201, 300), 200)
    cursors = {"a": 300, "b": 9}
    assert advance(cursors, cursor_codec.decode(frame_id), "a") is True
    assert cursors == {"a": 200, "b": 9}
    assert advance(cursors, {"a": 150}) is False  # only a rewound frame moves a cursor back
    for bad in ({**payload, "head_seq": "200"}, payload, {**payload, "head_seq": True}):
        with pytest.raises(FrameError):
            frame_rows("rewound", bad, ctx, cursors)


def test_index_ops_keep_landing_order_records_and_rewound_ranges():
    rows = [
        ("record", "a", 300, 3, None, "{}", None, None),
        ("caught-up", "a", None, None, None, None, None, None),
        ("record", "a", 301, 3, None, None, None, None),  # include_data: false: nothing to index
        ("rewound", "a", None, None, None, None, 201, 300),
        ("record", "a", 201, 4, "k", "[1]", None, None),
    ]
    assert index_ops(rows) == [
        ("a", 300, 3, None, "{}"),
        Rewound("a", 201, 300),
        ("a", 201, 4, "k", "[1]"),
    ]


def test_session_body_resumes_known_topics_and_starts_the_others():
    opts = WatchOptions(
        "http://x", ("a", "b", "c"), from_seq=5, consistency="strong", include_tags=False
    )
    body = session_body(opts, {"a": 9})
    assert body["topics"] == {"a": {"from_seq": 9}, "b": {"from_seq": 5}, "c": {"from_seq": 5}}
    assert body["consistency"] == "strong" and body["include_tags"] is False
    tail = session_body(WatchOptions("http://x", ("a",), tail=True), None)
    assert tail["topics"] == {"a": {"tail": True}} and "consistency" not in tail


def test_watchdog_is_twice_the_clamped_heartbeat_plus_slack():
    assert watchdog_s(15_000, 5_000) == 35.0
    assert watchdog_s(10, 100) == 2.1
    assert watchdog_s(600_000, 0) == 120.0


def test_progress_line_rates_and_lag():
    before = Stats(frames=10, records=100)
    now = Stats(
        frames=30,
        records=500,
        duplicates=3,
        reconnects=1,
        heads={"b": 50, "a": 9},
        cursors={"a": 9, "b": 20},
    )
    assert lags(now) == {"a": 0, "b": 30}
    line = progress_line(before, now, 2.0)
    assert line.startswith("frames/s=10 records/s=200 lag[a=0 b=30] ")
    assert "duplicates=3" in line and "reconnects=1" in line and "FAULTS" not in line
    assert "FAULTS dropped=2 corrupted=0" in progress_line(before, Stats(dropped=2), 1.0)


def _args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(
        [
            "--url",
            "http://127.0.0.1:8400/",
            "--topics",
            "a, b",
            "--consumer",
            "c1",
            "--landing",
            "/tmp/x",
            *extra,
        ]
    )


def _db() -> str:
    return "postgresql://x"


def test_config_from_flags():
    cfg = config_from_args(_args("--node", "n1", "--fault-corrupt", "3"), "k", _db)
    assert cfg.url == "http://127.0.0.1:8400" and cfg.topics == ("a", "b")
    assert cfg.consumer_dir == Location("file", "/tmp/x/c1") and cfg.key == "k"
    assert cfg.node == "n1" and cfg.lock_url is None and cfg.s3 is None
    assert cfg.index_url == "postgresql://x" and cfg.faults.corrupt == 3 and cfg.faults.enabled
    assert config_from_args(_args("--no-index"), None, _db).index_url is None
    assert config_from_args(_args(), "", None).key is None


def test_an_s3_landing_takes_the_aws_variables_and_locks_in_postgresql():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k", "AWS_REGION": "r"}
    s3 = _args("--landing", "s3://bars/landing/", "--no-index")
    cfg = config_from_args(s3, None, _db, env)
    assert cfg.consumer_dir.uri == "s3://bars/landing/c1" and cfg.index_url is None
    assert cfg.lock_url == "postgresql://x"
    assert cfg.s3 == S3Config(endpoint="http://127.0.0.1:9", access_key="k", region="r")
    flagged = _args("--landing", "s3://bars/landing", "--database-url", "postgresql://y")
    assert config_from_args(flagged, None, None, {}).lock_url == "postgresql://y"
    with pytest.raises(ConfigError, match=r"^--landing s3://bars/landing: an object store has no"):
        config_from_args(_args("--landing", "s3://bars/landing"), None, None, {})
    bad_env = {"AWS_ENDPOINT_URL": "127.0.0.1:9"}
    with pytest.raises(ConfigError, match="^--landing: AWS_ENDPOINT_URL='127.0.0.1:9'"):
        config_from_args(s3, None, _db, bad_env)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--topics", "bad name"], "--topics"),
        (["--topics", "a,a"], "--topics"),
        (["--consumer", "../up"], "--consumer"),
        (["--url", "ftp://x"], "--url"),
        (["--flush-ms", "0"], "--flush-ms"),
        (["--node", "has space"], "--node"),
        (["--fault-drop-fraction", "1.5"], "--fault"),
        (["--landing", "gs://bars/x"], "--landing: unsupported location 'gs://bars/x'"),
        (["--landing", "s3:/bars"], "--landing: unsupported location 's3:/bars'"),
        (["--landing", "S3://Bad_Bucket"], "--landing: location 'S3://Bad_Bucket': 'Bad_Bucket'"),
    ],
)
def test_config_names_the_bad_flag(extra, message):
    with pytest.raises(ConfigError, match=message):
        config_from_args(_args(*extra), None, None)
