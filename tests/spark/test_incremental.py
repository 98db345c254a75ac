"""Incremental runs equal one full audit: the same landing zone compacted and reconciled in
three consecutive runs, and all at once in a fresh warehouse, against the same PostgreSQL
source, give the same net verdicts per (consumer, topic, status) and the same audit log; the
full audit mode agrees; the sink-style faults (drops, corruptions) are exactly the defects.

Source: ``A`` seqs 1..30 (seq 4 from node web-1, one record an hour); ``G`` lost 1..20 to a
cap, keeps 21..30. Consumers, frame by frame (run 1 | run 2 | run 3):

- ``c1`` A: 1..3, 5, 5 again, 6 corrupted; drops 4 | 7..30 except 17 (dropped), a phantom
  31 | late copies (a re-send from rewound cursors) of 2 (a duplicate), 4 (repairs the silent
  gap), 6 (the mismatch becomes divergent: one copy matches, one differs) and of the phantom
  31 (above the head 30: still a phantom).
- ``gap`` (filters web-1) and ``gap2`` G: tombstone 1..10 | 21..30 (11..20 were never
  signalled: a retention gap whose verdict spans runs; unverifiable / silent gap).
- ``joiner`` subscribes A at 5 in run 3 only (a consumer that joins late).

A third warehouse makes the same three runs and prunes to the newest run
after each (``lifecycle.prune``, keep 1, as the runner and the DAG do): run 3 judges the late
copies of run 1's seqs against the pruned runs' ledger partition, and its verdicts are the
same.
"""

from __future__ import annotations

import pytest

from spark_jobs import lifecycle, runner
from spark_jobs.common import statuses as st
from spark_jobs.common.store import connect
from spark_jobs.warehouse import readers, tables
from spark_jobs.warehouse.layout import Layout
from watch_service.store import runs

from ..support import unique
from . import places
from .builders import Stream, make_source, payload, write_segment

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def streams(a: str, g: str) -> list[tuple[Stream, list[int]]]:
    """Each stream with the last frame number landed by runs 1, 2 and 3."""
    bad, ghost = {6: '{"n":"corrupt"}'}, {31: payload(31, a)}
    c1 = (
        Stream("c1-" + a, {a: 0})
        .records(a, [1, 2, 3], cursor=4)
        .records(a, [5])
        .records(a, [5])
        .records(a, [6], data=bad)
    )  # frames 1-4
    c1.records(a, [s for s in range(7, 31) if s != 17]).records(a, [31], data=ghost)  # 5-6
    (
        c1.records(a, [2], cursor=2)
        .records(a, [4], cursor=4)
        .records(a, [6], cursor=6)
        .records(a, [31], cursor=31, data=ghost)
    )  # 7-10
    gap = Stream("gap-" + a, {g: 0}, filter_node="web-1").tombstone(g, 1, 10)
    gap.records(g, list(range(21, 31)))
    gap2 = Stream("gap2-" + a, {g: 0}).tombstone(g, 1, 10).records(g, list(range(21, 31)))
    joiner = Stream("joiner-" + a, {a: 5}).records(a, list(range(6, 31)))
    return [(c1, [4, 6, 10]), (gap, [1, 2, 2]), (gap2, [1, 2, 2]), (joiner, [0, 0, 1])]


def land(landing, plan, run: int) -> None:
    for stream, ends in plan:
        write_segment(landing, stream, ends[run - 1] if run else 0, ends[run])


def net(url: str, layout: Layout) -> dict:
    with connect(url) as conn:
        return runs.cumulative_summary(conn, layout.catalog)


@pytest.fixture(scope="module", params=places.STORAGES)
def world(request, spark, pg_url, object_store, tmp_path_factory):
    a, g = unique("ia"), unique("ig")
    make_source(
        pg_url,
        {
            a: {"seqs": list(range(1, 31)), "nodes": {4: "web-1"}},
            g: {"seqs": list(range(21, 31)), "gap": (1, 20)},
        },
    )
    root = places.root(request.param, tmp_path_factory.mktemp("incremental"))
    plan = streams(a, g)
    inc = Layout(places.join(root, "landing"), places.join(root, "inc"), "")
    figures, run_ids, cached, before = [], [], [], places.cached_plans(spark)
    pruned = Layout(inc.landing, places.join(root, "pruned"), "")
    pruned_late, pruned_away, pruned_ids = [], [], []
    for run in range(3):
        land(inc.landing, plan, run)
        layout = Layout(inc.landing, inc.work, unique("inc"))
        figures.append(runner.run_steps(spark, layout, pg_url, partitions=2))
        run_ids.append(layout.run_id)
        cached.append(places.cached_plans(spark) - before)
        layout = Layout(inc.landing, pruned.work, unique("pruned"))
        done = runner.run_steps(spark, layout, pg_url, partitions=2)
        pruned_late.append(bool(done["reconcile"]["late"]))
        pruned_away += lifecycle.prune(pg_url, layout, 1)
        pruned_ids.append(layout.run_id)
    whole = Layout(inc.landing, places.join(root, "whole"), unique("whole"))
    whole_figures = runner.run_steps(spark, whole, pg_url, partitions=2)
    audit = runner.audit(spark, Layout(inc.landing, inc.work, unique("audit")), pg_url, 2)
    return {
        "a": a,
        "g": g,
        "inc": inc,
        "whole": whole,
        "figures": figures,
        "run_ids": run_ids,
        "url": pg_url,
        "whole_figures": whole_figures,
        "audit": audit,
        "cached": cached,
        "pruned": pruned,
        "pruned_late": pruned_late,
        "pruned_away": pruned_away,
        "pruned_ids": pruned_ids,
    }


def test_incremental_runs_equal_one_run_over_everything(world):
    inc, whole = net(world["url"], world["inc"]), net(world["url"], world["whole"])
    assert inc == whole
    a, g = world["a"], world["g"]
    D = st.DELIVERED
    assert inc == {
        ("c1-" + a, a, D): 28,
        ("c1-" + a, a, st.DUPLICATE): 2,
        # 6: the corrupted copy and the late good one (a different copy is a finding)
        ("c1-" + a, a, st.DIVERGENT): 1,
        ("c1-" + a, a, st.SILENT_GAP): 1,
        ("c1-" + a, a, st.PHANTOM): 1,
        ("gap-" + a, g, st.TOMBSTONED): 10,
        ("gap-" + a, g, st.UNVERIFIABLE): 10,
        ("gap-" + a, g, D): 10,
        ("gap2-" + a, g, st.TOMBSTONED): 10,
        ("gap2-" + a, g, st.SILENT_GAP): 10,
        ("gap2-" + a, g, D): 10,
        ("joiner-" + a, a, D): 25,
    }


def test_late_copies_judged_against_pruned_runs_give_the_same_verdicts(world):
    """Run 3's late copies of 2, 4 and 6 revise verdicts that run 1 gave, whose ledger rows
    the prune after run 2 moved to the pruned runs' partition."""
    assert net(world["url"], world["pruned"]) == net(world["url"], world["inc"])
    assert world["pruned_late"] == [False, True, True]
    # run 1 goes after run 2; run 2 stays, as a run whose repairs are still open (its
    # remaining 11) always does
    first, second, third = world["pruned_ids"]
    assert world["pruned_away"] == [first]
    ledger = readers.load(world["pruned"], world["url"], "ledger").scan().to_arrow()
    assert set(ledger["run_id"].to_pylist()) == {tables.PRUNED_LEDGER, second, third}


def test_runs_with_late_copies_leave_nothing_cached(world):
    """Runs 2 and 3 rejudge late copies (a frame cached across the run's own ledger write)."""
    assert world["cached"] == [0, 0, 0]


def test_the_full_audit_agrees(world):
    assert world["audit"]["agree"], world["audit"]["differences"]
    assert world["audit"]["differences"] == []


def test_the_audit_logs_are_the_same(world):
    url = world["url"]
    inc, whole = places.audit_rows(world["inc"], url), places.audit_rows(world["whole"], url)
    assert inc == whole
    keys = [(t, int(s)) for t, s, *_ in inc]
    assert len(keys) == len(set(keys))
    assert sorted(keys) == sorted(
        [(world["a"], s) for s in range(1, 31)] + [(world["g"], s) for s in range(21, 31)]
    )


def test_each_run_judges_only_its_window(world):
    first, second, third = (f["reconcile"] for f in world["figures"])
    assert first["batches"] == [1, 1] and second["batches"] == [2, 2]
    assert third["batches"] == [3, 3]
    # run 1: c1 1..6 + gap/gap2 1..10; run 2: c1 7..31 + gap/gap2 11..30; run 3: only the
    # joiner's 6..30 are new (the late copies revise verdicts: net zero seqs).
    assert (first["seqs"], second["seqs"], third["seqs"]) == (26, 65, 25)
    # run 2: the phantom 31, above the head 30, is judged by the late path
    assert third["late"] and not first["late"] and second["late"]
    assert [f["compact"]["segments"] for f in world["figures"]] == [3, 3, 2]


def test_injected_faults_are_exactly_the_defects_found(world):
    """Drops and corruptions, as the sink injects them, found seq by seq in the run that
    judged them; repaired ones (a later copy) are revised, the rest backfilled."""
    first, second, third = world["figures"]
    assert first["verify"]["found"] == 2  # 4 dropped, 6 corrupted
    assert first["verify"]["remaining"] == 0  # both backfilled from PostgreSQL
    assert second["verify"]["found"] == 1 + 10 + 1  # 17 dropped, gap2's 11..20, phantom 31
    assert second["verify"]["remaining"] == 11  # 17 backfilled; the rest cannot be
    assert third["verify"]["found"] == 1  # 6 is divergent now (repaired again)
    assert third["verify"]["passed"]


def test_the_audit_log_as_each_run_left_it(world):
    """c1 dropped A.17 in run 2, which backfill repaired: absent from the audit log as run 1
    left it, present (from the source) as run 2 left it, by the snapshot ids each run
    recorded."""
    url, a = world["url"], world["a"]
    with connect(url) as conn:
        snaps = [runs.run_snapshots(conn, r) for r in world["run_ids"]]
    as_of = [
        {
            (r["topic"], r["seq"]): r["origin"]
            for r in readers.audit_log(
                world["inc"], url, a, snapshot_id=snap[1]["audit_log"]
            ).to_pylist()
        }
        for snap in snaps
    ]
    assert all(snap[0] == world["inc"].catalog for snap in snaps)
    assert (a, 17) not in as_of[0] and (a, 16) not in as_of[0]
    assert as_of[1][(a, 17)] == st.ORIGIN_BACKFILL
    assert as_of[1][(a, 16)] == st.ORIGIN_DELIVERED
    assert set(as_of[0]) < set(as_of[1]) <= set(as_of[2])
