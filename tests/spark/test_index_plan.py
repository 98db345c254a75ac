"""Which seqs of the search index a run checks (``spark_jobs/steps/verify/index_plan``), pure."""

from __future__ import annotations

import pytest

from spark_jobs.steps.verify.index_plan import Check, behind, plan, summary
from watch_service.store.index_runs import Window

pytestmark = [pytest.mark.unit]


def test_a_run_checks_its_windows_and_a_slice_of_the_history_resumed_where_it_ended():
    windows = [
        Window("c1", "a", 9_000, 10_000, None),
        Window("c2", "a", 9_500, 10_000, None),  # same topic, another indexing consumer
        Window("c3", "b", 0, 50, None),  # c3 keeps no index
        Window("c1", "z", 300, 300, "n1"),  # an empty window
    ]
    checks = plan(windows, {"c1", "c2"}, {"a": 2_000}, minimum=4)
    assert checks == [
        Check("a", ((2_000, 3_000), (9_000, 10_000)), (), 3_000),
        Check("z", ((0, 4),), ("n1",), 4),
    ]


def test_the_slice_starts_over_at_the_bottom_once_it_reaches_the_windows():
    windows = [Window("c1", "a", 290, 300, None)]
    assert plan(windows, {"c1"}, {"a": 300}, minimum=4_096) == [Check("a", ((0, 300),), (), 290)]
    first = [Window("c1", "a", 0, 300, None)]  # a first run: nothing verified below it yet
    assert plan(first, {"c1"}, {}) == [Check("a", ((0, 300),), (), 0)]
    assert plan(windows, {"c1"}, {"a": 100}, minimum=20) == [
        Check("a", ((100, 120), (290, 300)), (), 120)
    ]


def test_a_node_is_left_out_only_when_every_indexing_consumer_filters_it():
    both = [Window("c1", "a", 0, 10, "n1"), Window("c2", "a", 0, 10, "n1")]
    mixed = [Window("c1", "a", 0, 10, "n1"), Window("c2", "a", 0, 10, None)]
    assert plan(both, {"c1", "c2"}, {})[0].filtered == ("n1",)
    assert plan(mixed, {"c1", "c2"}, {})[0].filtered == ()


def test_consumers_whose_index_trails_the_run_are_named():
    assert behind(
        {"c1": 10, "c2": 3, "c4": 1}, {"c1": 10, "c2": 5, "c3": 9}, ["c1", "c2", "c3"]
    ) == {"c2": (3, 5)}


def test_the_figures_count_by_kind_and_merge_the_seqs():
    checks = [Check("a", ((0, 100),), (), 100)]
    found = [("missing", "a", 5), ("missing", "a", 6), ("stale", "a", 9), ("extra", "a", 99)]
    assert summary(checks, found, [("stale", "a", 9)], 2, {"c2": (3, 5)}) == {
        "checked": 100,
        "missing": 2,
        "stale": 1,
        "extra": 1,
        "found": 4,
        "repaired": 2,
        "remaining": 1,
        "ranges": {"a": {"missing": [[5, 6]], "stale": [[9, 9]], "extra": [[99, 99]]}},
        "behind": {"c2": [3, 5]},
    }
