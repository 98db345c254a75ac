"""A run killed mid-write, then run again, ends exactly where a clean run ends: the step is
stopped (an exception from its crash hook, as a kill would) after compact computed its batch
but before the Iceberg commit, after reconcile wrote its outputs but before its PostgreSQL
commit, between backfill's audit-log append and its MERGE (the defect that run found stays
open and the next run repairs it), and before verify's commit. A run killed at compact or at
reconcile is recovered by the next run, itself killed later on (a crash after a crash). On
both storages."""

from __future__ import annotations

import pytest

from spark_jobs import runner
from spark_jobs.common.store import connect
from spark_jobs.warehouse.layout import Layout
from watch_service.store import runs

from ..support import unique
from . import places
from .builders import Stream, make_source, write_segment

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


class Killed(RuntimeError):
    pass


RERUN_AFTER = ("backfill.merging", "verify.committing")


def kill_at(point: str):
    def hook(reached: str) -> None:
        if reached == point:
            raise Killed(point)

    return hook


@pytest.fixture(scope="module", params=places.STORAGES)
def outcome(request, spark, pg_url, object_store, tmp_path_factory):
    a, b = unique("ca"), unique("cb")
    make_source(pg_url, {a: {"seqs": list(range(1, 41))}, b: {"seqs": list(range(1, 21))}})
    root = places.root(request.param, tmp_path_factory.mktemp("crash"))
    c = (
        Stream("c-" + a, {a: 0, b: 0})
        .records(a, list(range(1, 11)))
        .records(b, [1, 2, 3])
        .records(a, [s for s in range(11, 21) if s != 15])
        .records(b, list(range(4, 21)))
        .records(a, list(range(21, 41)))
    )
    d = Stream("d-" + a, {a: 30}).records(a, list(range(31, 41)))
    landing = places.join(root, "landing")
    clean = Layout(landing, places.join(root, "clean"), "")
    crashed = Layout(landing, places.join(root, "crashed"), "")
    # Something new for every run; frame 3 drops a.15, so the run killed in backfill leaves a
    # repair open that the next run carries forward. A run killed at compact or at reconcile is
    # recovered by the next killed run (a crash after a crash); the others by a plain rerun.
    points = ["compact.committing", "backfill.merging", "reconcile.committing", "verify.committing"]
    segments = [(c, 0, 2), (c, 2, 3), (c, 3, 5), (d, 0, 1)]
    reruns, cached, before = {}, [], places.cached_plans(spark)  # other modules share the session
    with places.shipped_settings(spark):  # adaptive execution and codegen on, as shipped
        for point, segment in zip(points, segments):
            write_segment(landing, *segment)
            killed = Layout(landing, crashed.work, unique("k"))
            with pytest.raises(Killed):
                runner.run_steps(spark, killed, pg_url, 2, hook=kill_at(point))
            cached.append(places.cached_plans(spark))
            if point in RERUN_AFTER:
                reruns[point] = runner.run_steps(
                    spark, Layout(landing, crashed.work, unique("r")), pg_url, 2
                )
                cached.append(places.cached_plans(spark))
        # Incremental runs equal one run over everything (test_incremental): the clean reference.
        runner.run_steps(spark, Layout(landing, clean.work, unique("c")), pg_url, 2)
    return {
        "clean": clean,
        "crashed": crashed,
        "url": pg_url,
        "reruns": reruns,
        "landed": len(c.rows) + len(d.rows),
        "cached": [n - before for n in cached],
    }


def test_no_segment_is_skipped_or_counted_twice(outcome):
    cols = ["consumer", "topic", "frame_no", "kind", "seq", "data_sha256", "cursor_before"]
    url = outcome["url"]
    crashed = places.table_rows(outcome["crashed"], url, "deliveries", cols)
    assert crashed == places.table_rows(outcome["clean"], url, "deliveries", cols)
    assert len(crashed) == outcome["landed"]


def test_verdicts_and_audit_log_equal_a_clean_run(outcome):
    with connect(outcome["url"]) as conn:
        crashed = runs.cumulative_summary(conn, outcome["crashed"].catalog)
        clean = runs.cumulative_summary(conn, outcome["clean"].catalog)
    assert crashed == clean and clean
    cols = ["topic", "seq", "ts", "data_sha256", "origin"]
    audit = places.audit_rows(outcome["crashed"], outcome["url"], cols)
    assert audit == places.audit_rows(outcome["clean"], outcome["url"], cols)
    assert len({(t, s) for t, s, *_ in audit}) == len(audit) == 40 + 20


def test_a_repair_left_open_by_a_killed_backfill_is_carried_forward(outcome):
    rerun = outcome["reruns"]["backfill.merging"]
    assert rerun["reconcile"]["seqs"] == 0  # nothing new to judge
    assert rerun["backfill"]["carried_runs"] == 1  # the killed run's repair
    assert rerun["backfill"]["repair_keys"] == 1  # a.15
    assert rerun["verify"]["carried_runs"] == 1 and rerun["verify"]["passed"]
    later = outcome["reruns"]["verify.committing"]
    assert later["backfill"]["carried_runs"] == 0  # closed by that verify


def test_a_step_leaves_nothing_cached_even_when_killed(outcome):
    """What a step cached is unpersisted when it ends, killed or not: a session that runs
    many steps (the runner, the Spark Connect server) would otherwise fill its heap."""
    assert outcome["cached"] == [0] * 6
