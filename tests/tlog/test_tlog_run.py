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


def test_the_runner_names_the_log_failure_not_only_the_defects() -> None:
    from spark_jobs.runner import gate_failure

    why = "orders: seq 5 differs from the signed log: the audit log's row is not the row that was signed"  # noqa: E501
    bad = {"topic": "orders", "seq": 5, "why": why}
    assert gate_failure({"remaining": 0, "carried_left": 0, "log_failure": bad}) == (
        f"the signed audit log does not verify: {why}"
    )
    assert gate_failure({"remaining": 2, "carried_left": 0, "log_failure": bad}) == (
        f"defects remain after backfill; the signed audit log does not verify: {why}"
    )
    assert gate_failure({"remaining": 2, "carried_left": 0, "log_failure": None}) == (
        "defects remain after backfill"
    )
