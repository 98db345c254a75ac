"""The upkeep rounds' pace: a flush round and a sweep each look at every open stream, so with
many streams they come less often, and the CPU they take does not grow with the streams."""

from __future__ import annotations

import pytest

from watch_service.server.stream_upkeep import (
    FLUSH_ROWS_PER_S,
    FLUSH_SCAN_PER_S,
    SWEEP_SCAN_PER_S,
    round_interval,
)
from watch_service.server.watch_stream import SWEEP_S

pytestmark = pytest.mark.unit


def test_few_streams_keep_the_configured_pace():
    assert round_interval(0.2, 0, FLUSH_SCAN_PER_S) == 0.2
    assert round_interval(0.2, 1000, FLUSH_SCAN_PER_S) == 0.2
    assert round_interval(SWEEP_S, 2500, SWEEP_SCAN_PER_S) == SWEEP_S


def test_many_streams_are_looked_at_no_faster_than_the_budget():
    for streams in (1001, 5000, 10_000, 20_000):
        flush = round_interval(0.2, streams, FLUSH_SCAN_PER_S)
        sweep = round_interval(SWEEP_S, streams, SWEEP_SCAN_PER_S)
        assert streams / flush == pytest.approx(FLUSH_SCAN_PER_S)
        assert streams / sweep <= SWEEP_SCAN_PER_S + 1e-9
    # 5,000 streams in one worker: a flush round a second (up to FLUSH_ROWS_PER_S cursor
    # maps in it: the rows written a second do not change), a sweep every half second
    assert round_interval(0.2, 5_000, FLUSH_SCAN_PER_S) == 1.0
    assert int(FLUSH_ROWS_PER_S * 1.0) == FLUSH_ROWS_PER_S
    assert round_interval(SWEEP_S, 5_000, SWEEP_SCAN_PER_S) == 0.5
