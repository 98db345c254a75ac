"""The sweep window of the signed log's per-run check (``spark_jobs.tlog_run.window``)."""

from __future__ import annotations

import pytest

from spark_jobs.tlog_run import window

pytestmark = pytest.mark.unit


def test_the_window_sweeps_the_signed_seqs_and_wraps() -> None:
    assert window(0, 0, 4) == (0, 0)
    assert window(10, 0, 4) == (0, 4)
    assert window(10, 4, 4) == (4, 8)
    assert window(10, 8, 4) == (8, 10)
    assert window(10, 10, 4) == (0, 4)  # past the end: from the start again
    assert window(10, 25, 4) == (0, 4)  # a cursor from a longer log (a fork): from the start
    assert window(3, 0, 65536) == (0, 3)
