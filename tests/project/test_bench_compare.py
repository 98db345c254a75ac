"""bench/compare.py's pure parts: the figures it reads from each benchmark and its ratio table.
(The comparison itself is a benchmark: run by hand, never by the suite.)"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_compare", Path(__file__).resolve().parents[2] / "bench" / "compare.py"
)
assert _SPEC is not None and _SPEC.loader is not None
compare = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compare)


@pytest.mark.unit
def test_watch_figures_are_the_service_s_and_its_ratio_to_the_floor_of_the_same_run() -> None:
    doc = {
        "floor 100 p50": 2.0,
        "floor 100 p99": 4.0,
        "floor 100 us_per_delivery": 4.5,
        "service 100 p50": 3.0,
        "service 100 p99": 5.0,
        "service 100 us_per_delivery": 10.0,
        "service 100 lost": 0,
        "saturation_delivered": 1e6,
    }
    assert compare.watch_figures(doc) == {
        "watch 100 p50": 3.0,
        "watch 100 p50 svc/floor": 1.5,
        "watch 100 p99": 5.0,
        "watch 100 p99 svc/floor": 1.25,
        "watch 100 us_per_delivery": 10.0,
        "watch 100 us_per_delivery svc/floor": 10.0 / 4.5,
    }


@pytest.mark.unit
def test_pipeline_figures_are_read_from_its_lines() -> None:
    text = (
        "history         0: written in 0.1 s, reconciled in 30.0 s (load average 1 1 1)\n"
        "+2,000 over         0: compact   23.0  reconcile   22.0  total   69.0  "
        "rewind_checks    0.5 (load average 2.00 1.00 0.50)\n"
        "empty DAG run (spark-connect): 35.5 s exit 0  [a success 1.0] (load average 1 1 1)\n"
    )
    assert compare.pipeline_figures(text) == {
        "pipeline +new over 0 compact s": 23.0,
        "pipeline +new over 0 reconcile s": 22.0,
        "pipeline +new over 0 total s": 69.0,
        "pipeline +new over 0 rewind_checks s": 0.5,
        "pipeline empty DAG spark-connect s": 35.5,
    }


@pytest.mark.unit
def test_the_ratio_table_shows_medians_counts_and_head_over_base() -> None:
    table = compare.ratio_table(
        {"watch 1 p50": [2.0, 4.0, 3.0], "gone": [1.0]},
        {"watch 1 p50": [1.5, 1.2, math.nan, 1.8], "new": [2.0]},
    )
    assert table.splitlines() == [
        f"{'figure':<44} {'base':>12} {'head':>12} {'head/base':>9}",
        f"{'gone':<44} {'1 (1)':>12} {'-':>12} {'-':>9}",
        f"{'new':<44} {'-':>12} {'2 (1)':>12} {'-':>9}",
        f"{'watch 1 p50':<44} {'3 (3)':>12} {'1.5 (3)':>12} {'0.50':>9}",
    ]


@pytest.mark.unit
def test_runs_alternate_so_a_drift_in_load_falls_on_both() -> None:
    assert compare.schedule(3) == ["base", "head", "head", "base", "base", "head"]
