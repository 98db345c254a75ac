"""The run lifecycle in the run tables (``spark_jobs.lifecycle``, ``store/run_retention``):
start, fail with the step and its reason, start again; which runs a prune keeps and what it
deletes, on a real PostgreSQL with many cheap runs written through the store layer. The
Iceberg side and time travel: ``tests/spark/test_run_retention.py``; under Airflow:
``tests/airflow/test_failed_run.py``."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from spark_jobs import lifecycle
from spark_jobs.warehouse.layout import Layout
from tests.support import unique
from watch_service.settings import SettingsError
from watch_service.store import run_retention, runs

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.unit
def test_keep_runs_setting():
    assert lifecycle.keep_runs({}) == 96
    assert lifecycle.keep_runs({"AUDITSYNC_KEEP_RUNS": " 12 "}) == 12
    with pytest.raises(SettingsError) as bad:
        lifecycle.keep_runs({"AUDITSYNC_KEEP_RUNS": "a day"})
    assert str(bad.value) == "AUDITSYNC_KEEP_RUNS: expected a whole number of runs, got 'a day'"
    with pytest.raises(SettingsError) as zero:
        lifecycle.keep_runs({"AUDITSYNC_KEEP_RUNS": "0"})
    assert str(zero.value) == (
        "AUDITSYNC_KEEP_RUNS: must keep at least 1 run (the current one), got 0"
    )


@pytest.mark.unit
def test_one_line_reason():
    error = RuntimeError("\n  cannot read s3://b/part-1.parquet: not a Parquet file\nat …\n")
    assert lifecycle.one_line(error) == (
        "RuntimeError: cannot read s3://b/part-1.parquet: not a Parquet file"
    )
    assert lifecycle.one_line(ValueError()) == "ValueError"
    assert lifecycle.one_line("verify did not pass\ndetails") == "verify did not pass"
    long = lifecycle.one_line("x" * 1000)
    assert len(long) == lifecycle.REASON_CHARS and long.endswith("…")


@pytest.mark.unit
def test_choose_keeps_the_newest_and_what_later_runs_need():
    # newest first: (run_id, at, repairs_open, holds a newest window)
    by_age = [
        ("r6", 6, False, True),
        ("r5", 5, False, False),
        ("r4", 4, False, False),
        ("r3", 3, True, False),  # open repairs
        ("r2", 2, False, False),
        ("r1", 1, False, True),  # a quiet topic's newest window
        ("r0", 0, False, False),
    ]
    assert run_retention.choose(by_age, 2, "r6") == (["r4", "r2", "r0"], 1)
    assert run_retention.choose(by_age, 2, "r0") == (["r4", "r2"], 0)  # never the current
    assert run_retention.choose(by_age, 10, "r6") == ([], 0)
    assert run_retention.choose([], 2, "r6") == ([], None)


def _run(conn, catalog: str, run_id: str, at: dt.datetime, batch: int, windows, summary):
    runs.start_run(conn, run_id, catalog)
    runs.commit_reconcile(conn, catalog, run_id, (batch, batch), False, windows, summary)
    runs.finish_run(conn, run_id, True, 0, 0)
    # Start and commit times as a run every 15 minutes would leave them.
    conn.execute("UPDATE pipeline_runs SET started_at = %s WHERE run_id = %s", (at, run_id))
    conn.execute("UPDATE reconcile_runs SET recorded_at = %s WHERE run_id = %s", (at, run_id))


@pytest.mark.pg
def test_a_failed_run_names_its_step_and_a_retry_runs_again(pg_url):
    run_id, catalog = unique("lifecycle"), unique("house")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        lifecycle.start(conn, run_id, catalog)
        lifecycle.fail(conn, run_id, "compact", OSError("Not a directory: /w/x\n  at …"))
        assert runs.get_run(conn, run_id)[0] == "failed"
        assert runs.run_failure(conn, run_id) == ("compact", "OSError: Not a directory: /w/x")
        lifecycle.start(conn, run_id, catalog)  # the same interval, re-tried
        assert runs.get_run(conn, run_id)[0] == "running"
        assert runs.run_failure(conn, run_id) == (None, None)
        runs.record_verify(conn, run_id, [], [], [], 0, [])
        assert runs.get_run(conn, run_id)[:3] == ("passed", 0, 0)
        # A failed gate keeps its figures; the callback adds where and why.
        runs.record_verify(conn, run_id, [("c", "t", "phantom", 1, 1, [9])], [], [], 0, [])
        lifecycle.fail(conn, run_id, "verify", "Spark step verify did not pass: defects")
        assert runs.get_run(conn, run_id)[:3] == ("failed", 1, 1)
        assert runs.run_failure(conn, run_id) == (
            "verify",
            "Spark step verify did not pass: defects",
        )
        # A run failed before it started (the sensor) is a row of its own.
        early = unique("lifecycle")
        lifecycle.fail(conn, early, "wait_for_sinks", "sinks lag", catalog)
        assert runs.get_run(conn, early)[0] == "failed"


@pytest.mark.pg
def test_pruning_deletes_exactly_the_oldest_runs_rows(pg_url, tmp_path):
    """9 runs, keep 4: the newest 4 stay, the current one always, run 2 with open repairs and
    run 1 with a quiet topic's newest window stay too; runs 0, 3 and 4 go, with their windows,
    summaries and the alerts sent before the oldest kept run. The cumulative summary and every
    consumer's reconciled_through are unchanged. (The warehouse has no tables yet: the
    Iceberg half is ``tests/spark/test_run_retention.py``.)"""
    prefix = unique("prune")
    ids = [f"{prefix}-run-{i}" for i in range(9)]
    layout = Layout("", str(tmp_path / "warehouse"), ids[-1])
    catalog = layout.catalog
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for i, run_id in enumerate(ids):
            windows = [("c1", "busy", 0, 10 * i, 10 * i + 10, None)]
            if i == 1:
                windows.append(("c1", "quiet", 0, 0, 5, None))
            summary = [("c1", "busy", "delivered", 10, 0), ("c1", "busy", "silent_gap", i, 0)]
            _run(conn, catalog, run_id, T0 + dt.timedelta(minutes=15 * i), i + 1, windows, summary)
        conn.execute("UPDATE reconcile_runs SET repairs_open = true WHERE run_id = %s", (ids[2],))
        old_alert, new_alert = unique("airflow-run"), unique("airflow-run")
        conn.execute(
            "INSERT INTO alerts_sent (dag_id, run_id, kind, channel, sent_at) VALUES "
            "('audit_sync', %s, 'defects_found', 'email', %s), "
            "('audit_sync', %s, 'defects_found', 'email', now())",
            (old_alert, T0 - dt.timedelta(days=1), new_alert),
        )
        before = runs.cumulative_summary(conn, catalog)
        progress = conn.execute(
            "SELECT consumer, topic, start_seq, reconciled_through FROM reconcile_progress "
            "WHERE warehouse = %s ORDER BY 1, 2",
            (catalog,),
        ).fetchall()

    removed = lifecycle.prune(pg_url, layout, 4)
    assert removed == [ids[4], ids[3], ids[0]]

    with psycopg.connect(pg_url, autocommit=True) as conn:
        kept = {ids[i] for i in (1, 2, 5, 6, 7, 8)}
        for table in ("pipeline_runs", "reconcile_runs"):
            rows = conn.execute(
                f"SELECT run_id FROM {table} WHERE warehouse = %s", (catalog,)
            ).fetchall()
            assert {r for (r,) in rows} == kept, table
        for table in ("reconcile_windows", "reconcile_summary"):
            rows = conn.execute(
                f"SELECT DISTINCT run_id FROM {table} WHERE run_id = ANY(%s)", (ids,)
            ).fetchall()
            assert {r for (r,) in rows} == kept, table
        assert runs.cumulative_summary(conn, catalog) == before
        assert (
            conn.execute(
                "SELECT consumer, topic, start_seq, reconciled_through FROM reconcile_progress "
                "WHERE warehouse = %s ORDER BY 1, 2",
                (catalog,),
            ).fetchall()
            == progress
        )
        alerts = conn.execute(
            "SELECT run_id FROM alerts_sent WHERE run_id = ANY(%s)", ([old_alert, new_alert],)
        ).fetchall()
        assert alerts == [(new_alert,)]
    # Nothing more to prune: a second pass deletes nothing.
    assert lifecycle.prune(pg_url, layout, 4) == []


@pytest.mark.unit
def test_merge_plan_merges_whole_unchanged_blocks_only():
    # (topic, seq_from, seq_to, digest as judged, digest now, run_id, records now)
    parts = [
        ("t", 1, 300, "a", "a", "r1", 300),
        ("t", 301, 1023, "b", "b", "r2", 723),  # block 0: merged, judged last by r2
        ("t", 1024, 1100, "c", "c", "r2", 77),
        ("t", 1101, 1200, "d", "D", "r3", 100),  # block 1: a range changed since: kept
        ("t", 2048, 2100, "e", "e", "r3", 53),  # block 2: one range, nothing to merge
        ("u", 5, 9, "f", "f", "r1", 5),
        ("u", 9, 20, "g", "g", "r2", 12),  # overlapping ranges: kept
        ("v", 1, 2, "h", None, "r1", 0),
        ("v", 3, 4, "i", None, "r2", 0),  # trimmed since (no digest now): kept
    ]
    assert run_retention.merge_plan(parts) == [("t", 1, 1023, "r2", 1023)]
    assert run_retention.merge_plan([]) == []


@pytest.mark.pg
def test_every_run_table_stays_bounded_over_many_runs(pg_url, tmp_path):
    """12 runs, each judging the next 250 seqs of a 3,000-record topic and pruning with keep 3,
    as the runner and the DAG's finish_run do. After every prune each run table holds the same
    bounded count whatever the history: 3 runs' rows, the alerts sent since the oldest kept
    run, and digests of one range per block plus the kept runs' partial ones. At the end every
    block is one range whose digest is the source's, and a trim drops the trimmed block's."""
    prefix, topic = unique("bounded"), unique("digests")
    ids = [f"{prefix}-run-{i}" for i in range(13)]
    keep, per_run, records = 3, 250, 3000
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO topics (name, head_seq) VALUES (%s, %s)", (topic, records))
        conn.execute(
            "INSERT INTO records (topic, seq, ts, data) "
            "SELECT %s, g, g, json_build_object('n', g) FROM generate_series(1, %s) g",
            (topic, records),
        )

    def digest(conn, lo: int, hi: int) -> str:
        key = {"topic": topic, "lo": lo, "hi": hi}
        return conn.execute(run_retention.UNION_DIGEST, key).fetchone()[0]

    def counts(conn, catalog: str) -> dict[str, int]:
        def one(sql: str, *args: object) -> int:
            return conn.execute(sql, args).fetchone()[0]

        return {
            "pipeline_runs": one(
                "SELECT count(*) FROM pipeline_runs WHERE warehouse = %s", catalog
            ),
            "reconcile_runs": one(
                "SELECT count(*) FROM reconcile_runs WHERE warehouse = %s", catalog
            ),
            "reconcile_windows": one(
                "SELECT count(*) FROM reconcile_windows WHERE run_id = ANY(%s)", ids
            ),
            "reconcile_summary": one(
                "SELECT count(*) FROM reconcile_summary WHERE run_id = ANY(%s)", ids
            ),
            "alerts_sent": one("SELECT count(*) FROM alerts_sent WHERE run_id = ANY(%s)", ids),
            "reconcile_digests": one(
                "SELECT count(*) FROM reconcile_digests WHERE warehouse = %s", catalog
            ),
        }

    seen = []
    for i, run_id in enumerate(ids):
        layout = Layout("", str(tmp_path / "warehouse"), run_id)
        at = T0 + dt.timedelta(minutes=15 * i)
        lo, hi = per_run * i + 1, min(records, per_run * (i + 1))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            windows = [("c1", topic, 0, lo - 1, hi, None)]
            _run(conn, layout.catalog, run_id, at, i + 1, windows, [("c1", topic, "ok", 1, 0)])
            pieces = []  # the judged seqs split at block boundaries, as range_digests does
            while lo <= hi:
                end = min(hi, (lo // runs.DIGEST_BUCKET + 1) * runs.DIGEST_BUCKET - 1)
                pieces.append((topic, lo, end, digest(conn, lo, end)))
                lo = end + 1
            runs.store_digests(conn, layout.catalog, run_id, pieces)
            conn.execute(
                "INSERT INTO alerts_sent (dag_id, run_id, kind, channel, sent_at) "
                "VALUES ('audit_sync', %s, 'defects_found', 'email', %s)",
                (run_id, at),
            )
            if i == len(ids) - 1:  # retention trims block 0 before the last run's prune
                conn.execute("DELETE FROM records WHERE topic = %s AND seq < 1024", (topic,))
                conn.execute("UPDATE topics SET earliest_seq = 1024 WHERE name = %s", (topic,))
        lifecycle.prune(pg_url, layout, keep)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            seen.append(counts(conn, layout.catalog))

    runs_rows = [min(i + 1, keep) for i in range(len(ids))]
    for name in ("pipeline_runs", "reconcile_runs", "reconcile_windows", "reconcile_summary"):
        assert [c[name] for c in seen] == runs_rows, name
    assert [c["alerts_sent"] for c in seen] == runs_rows
    # Digest rows: a pruned run's blocks merge into one range each (the prunes after runs 3,
    # 7 and 11 merge blocks 0, 1 and 2), so never more than the blocks plus the kept runs'
    # partial ranges; the last prune drops the trimmed block 0.
    assert [c["reconcile_digests"] for c in seen] == [1, 2, 3, 1, 3, 4, 4, 2, 4, 5, 5, 3, 2]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT seq_from, seq_to, digest, run_id FROM reconcile_digests "
            "WHERE warehouse = %s ORDER BY seq_from",
            (layout.catalog,),
        ).fetchall()
        assert rows == [
            (1024, 2047, digest(conn, 1024, 2047), ids[8]),
            (2048, 3000, digest(conn, 2048, 3000), ids[11]),
        ]


@pytest.mark.unit
def test_the_runner_refuses_a_bad_keep_runs(capsys, monkeypatch):
    from spark_jobs import runner

    with pytest.raises(SystemExit) as refused:
        runner.build_parser().parse_args(
            ["run", "--landing", "l", "--work", "w", "--keep-runs", "0"]
        )
    assert refused.value.code == 2
    assert (
        "--keep-runs: must keep at least 1 run (the current one), got 0" in capsys.readouterr().err
    )
    monkeypatch.setenv("AUDITSYNC_KEEP_RUNS", "many")
    assert runner.main(["run", "--landing", "l", "--work", "w"]) == runner.EXIT_STEP_ERROR
    assert capsys.readouterr().err == (
        "[pipeline] AUDITSYNC_KEEP_RUNS: expected a whole number of runs, got 'many'\n"
    )
