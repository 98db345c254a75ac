"""An install that kept the pipeline's state in the source's database, then set
``AUDITSYNC_PIPELINE_DATABASE_URL`` apart (issue 32): a run stops with one line naming the
move, ``auditsync pipeline move-state`` moves the state once, and a second move refuses."""

from __future__ import annotations

import psycopg
import pytest

from spark_jobs import runner
from watch_service.store import pipeline_state

from ..restore import RestorableDatabase
from ..support import unique

pytestmark = pytest.mark.pg

REFUSAL = (
    "[pipeline] the pipeline database (AUDITSYNC_PIPELINE_DATABASE_URL) holds no pipeline "
    "state, but the source's database holds 1 run(s) and 1 catalog table(s): run "
    "`auditsync pipeline move-state` once to move them there\n"
)


@pytest.fixture
def pair(pg_url, tmp_path):
    name = unique("move").replace("-", "_")
    source = RestorableDatabase(pg_url, f"{name}_source", tmp_path).create()
    pipeline = RestorableDatabase(pg_url, f"{name}_pipeline", tmp_path).create()
    with psycopg.connect(source.url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pipeline_runs (run_id, status, warehouse) VALUES ('r1', 'passed', 'wh')"
        )
        conn.execute(
            "INSERT INTO reconcile_runs (run_id, warehouse, batch_from, batch_to) "
            "VALUES ('r1', 'wh', 1, 1)"
        )
        conn.execute(
            "INSERT INTO reconcile_windows (run_id, consumer, topic, start_seq, seq_from, seq_to)"
            " VALUES ('r1', 'c1', 't', 1, 1, 10)"
        )
        conn.execute(
            "INSERT INTO iceberg.iceberg_tables (catalog_name, table_namespace, table_name, "
            "metadata_location) VALUES ('wh', 'audit', 'audit_log', 'file:///w/m1.json')"
        )
    yield source.url, pipeline.url
    source.drop()
    pipeline.drop()


def counts(url: str) -> tuple[int, int, int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "pipeline_runs",
                "reconcile_runs",
                "reconcile_windows",
                "iceberg.iceberg_tables",
            )
        )


def test_a_run_names_the_move_and_the_move_happens_once(pair, capsys, tmp_path):
    source, pipeline = pair
    urls = ["--database-url", source, "--pipeline-database-url", pipeline]
    where = ["--landing", str(tmp_path / "landing"), "--work", str(tmp_path / "work")]
    assert runner.main(["run", *where, *urls]) == 2
    assert capsys.readouterr() == ("", REFUSAL)

    assert runner.main(["move-state", *urls]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.endswith(
        ": pipeline_runs 1, reconcile_runs 1, reconcile_windows 1, iceberg.iceberg_tables 1\n"
    )
    assert out.startswith("[pipeline] moved the pipeline's state to postgresql://")
    assert (counts(source), counts(pipeline)) == ((0, 0, 0, 0), (1, 1, 1, 1))
    with psycopg.connect(pipeline, autocommit=True) as conn:
        assert conn.execute("SELECT metadata_location FROM iceberg.iceberg_tables").fetchone() == (
            "file:///w/m1.json",
        )

    assert runner.main(["move-state", *urls]) == 2
    assert capsys.readouterr() == (
        "",
        "[pipeline] move-state: the pipeline database already holds pipeline state: nothing "
        "moved (the source's copy, if any, is left as it is)\n",
    )
    assert (counts(source), counts(pipeline)) == ((0, 0, 0, 0), (1, 1, 1, 1))


def test_the_refusal_is_decided_by_what_each_database_holds():
    empty, ran = pipeline_state.Held(0, 0), pipeline_state.Held(3, 7)
    assert pipeline_state.refusal(empty, empty) is None  # a new install
    assert pipeline_state.refusal(ran, ran) is None  # moved, the source's copy left
    assert pipeline_state.refusal(empty, ran) is None  # apart from the start
    assert pipeline_state.refusal(ran, empty) == (
        "the pipeline database (AUDITSYNC_PIPELINE_DATABASE_URL) holds no pipeline state, but "
        "the source's database holds 3 run(s) and 7 catalog table(s): run "
        "`auditsync pipeline move-state` once to move them there"
    )


def test_move_state_needs_a_pipeline_database_apart(pg_url, capsys):
    assert runner.main(["move-state", "--database-url", pg_url]) == 2
    assert capsys.readouterr() == (
        "",
        "[pipeline] move-state: no pipeline database apart from the source (set "
        "AUDITSYNC_PIPELINE_DATABASE_URL or --pipeline-database-url)\n",
    )
