"""SIGTERM and SIGINT end the sink process cleanly: the buffer is flushed to a segment, the
cursor persisted, and the exit status is 0."""

import signal

import pytest

from watch_service.protocol import cursor as cursor_codec

from ..support import wait_for
from . import harness as lv
from .stub import HANG, StubWatch, record_frame

pytestmark = pytest.mark.service


@pytest.fixture
async def stub():
    server = await StubWatch().start()
    yield server
    await server.stop()


@pytest.mark.parametrize(
    "sig, landing_location",
    [
        pytest.param(signal.SIGTERM, "local", id="SIGTERM-local"),
        pytest.param(signal.SIGINT, "local", id="SIGINT-local"),
        pytest.param(signal.SIGTERM, "s3", id="SIGTERM-s3", marks=pytest.mark.s3),
    ],
    indirect=["landing_location"],
)
async def test_signal_flushes_the_buffer_and_exits_0(
    stub, tmp_path, sig, landing_location, request
):
    stub.scripts.append(
        [
            record_frame("a", [1, 2], {"a": 2, "b": 0}),
            record_frame("b", [1], {"a": 2, "b": 1}),
            HANG,
        ]
    )
    consumer = landing_location.child("c1")
    # an object-store consumer is locked in PostgreSQL, even without a search index
    lock = (
        []
        if landing_location.location.is_local
        else ["--database-url", request.getfixturevalue("pg_url")]
    )
    # Nothing flushes on its own (huge row and time limits): only the signal can land it.
    sink = lv.SinkProcess(
        [
            "--url",
            stub.url,
            "--topics",
            "a,b",
            "--consumer",
            "c1",
            *lv.landing_flags(landing_location),
            *lock,
            "--no-index",
            "--flush-rows",
            "1000000",
            "--flush-ms",
            "3600000",
            "--progress-s",
            "0.1",
        ],
        tmp_path / "sink.log",
        lv.landing_env(landing_location),
    )
    sink.start()
    await wait_for(
        lambda: sink.alive() and " frames=2 " in sink.log.read_text(),
        timeout=60,
        what="the sink to have buffered both frames",
    )
    assert lv.segments(consumer) == []
    assert await sink.end(sig) == 0
    assert [(r["topic"], r["seq"]) for r in lv.rows(consumer)] == [("a", 1), ("a", 2), ("b", 1)]
    state = lv.state(consumer)
    assert state["frame_no"] == 2 and state["last_id"] == cursor_codec.encode({"a": 2, "b": 1})
    assert "stopped after frame 2" in sink.log.read_text()
