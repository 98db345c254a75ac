"""`airflow dags test audit_sync` end to end on the embedded defaults: real PostgreSQL, the
real service and sink (with injected faults) writing the landing zone, Spark local[2]."""

from __future__ import annotations

import collections
import json
import re
import sqlite3

import pytest

from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.tlog import note

from .conftest import AUDIT_SYNC_TASKS as TASKS
from .conftest import CONSUMER, LOG_SIGNER, pg_rows

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.timeout(900)]


def faults_by_topic(landing_dir) -> dict[tuple[str, str], int]:
    from watch_service.sink.landing import Landing
    from watch_service.storage import Storage

    faults = Landing(Storage.at(landing_dir), CONSUMER).load_faults()
    return collections.Counter((kind, topic) for kind, topic, _ in faults)


def test_the_retention_dag_ran_auditsync_retention(landing, pg_url):
    assert "retention: " in landing.retention_output
    assert "gap(s) written" in landing.retention_output
    assert pg_rows(
        pg_url, "SELECT gap_from, gap_to, reason FROM gaps WHERE topic = %s", landing.capped
    ) == [(1, 70, "cap")]


def test_faults_are_found_backfilled_and_the_checkpoint_passes(fault_run, landing, pg_url):
    assert fault_run.returncode == 0, fault_run.output[-5000:]
    assert fault_run.states == dict.fromkeys(TASKS, "success")
    assert "data quality PASSED" in fault_run.output
    counts = {(t, s): (n, left) for _, t, s, n, left, _ in fault_run.facts["summary"]}
    faults = faults_by_topic(fault_run.landing)
    for topic in landing.topics:
        drops, corrupt = faults[("drop", topic)], faults[("corrupt", topic)]
        assert counts.get((topic, "silent_gap"), (0, 0)) == (drops, 0), topic
        assert counts.get((topic, "mismatch"), (0, 0)) == (corrupt, 0), topic
    assert counts[(landing.capped, "tombstoned")][0] == 70
    [(status, found, remaining)] = pg_rows(
        pg_url,
        "SELECT status, defects_found, defects_remaining FROM pipeline_runs WHERE run_id = %s",
        fault_run.run_id,
    )
    assert (status, remaining) == ("passed", 0)
    assert found == sum(landing.faults.values())
    # verify signed each topic's audit log, after the repair, with the connection's key
    [(log_status, checkpoints)] = pg_rows(
        pg_url,
        "SELECT log_status, checkpoints FROM pipeline_runs WHERE run_id = %s",
        fault_run.run_id,
    )
    assert log_status == "signed"
    assert {t: c["size"] for t, c in checkpoints.items()} == landing.topics
    for topic, c in checkpoints.items():
        opened = note.open_checkpoint(
            c["note"], LOG_SIGNER.verifier, f"auditsync.test/airflow/{topic}"
        )
        assert (opened.size, note.Checkpoint.text(opened).split("\n")[2]) == (c["size"], c["root"])


def test_the_audit_log_is_complete_and_unique(fault_run, landing, pg_url):
    table = readers.audit_log(Layout("", str(fault_run.warehouse), ""), pg_url)
    seqs = collections.defaultdict(set)
    for topic, seq in zip(table["topic"].to_pylist(), table["seq"].to_pylist()):
        seqs[topic].add(seq)
    assert table.num_rows == sum(len(s) for s in seqs.values())  # (topic, seq) unique
    for topic, head in landing.topics.items():
        first = 71 if topic == landing.capped else 1
        assert seqs[topic] == set(range(first, head + 1)), topic


def test_the_search_index_is_repaired(fault_run, landing, pg_url):
    topics = list(landing.topics)
    newest = pg_rows(
        pg_url,
        "SELECT topic, tag, max(seq) FROM records WHERE topic = ANY(%s) "
        "GROUP BY 1, 2 ORDER BY 1, 2",
        topics,
    )
    indexed = pg_rows(
        pg_url,
        "SELECT topic, tag, seq FROM search_documents WHERE topic = ANY(%s) ORDER BY 1, 2",
        topics,
    )
    assert indexed == newest


def test_quality_report_and_asset_events(fault_run, airflow_home):
    docs = airflow_home.gx_root / "gx" / "uncommitted" / "data_docs" / "local_site"
    assert (docs / "index.html").is_file()
    assert list((docs / "validations").rglob("*.html"))
    with sqlite3.connect(airflow_home.local / "airflow" / "airflow.db") as db:
        events = db.execute(
            "SELECT a.name, e.extra FROM asset_event e JOIN asset a "
            "ON a.id = e.asset_id ORDER BY e.id"
        ).fetchall()
    published = {name: json.loads(extra) for name, extra in events}
    # the named assets; the tables published through the alias are test_lineage's
    assert {n for n in published if n.startswith("auditsync_")} == {
        "auditsync_audit_log",
        "auditsync_search_index",
        "auditsync_reconciliation",
        "auditsync_quality_report",
    }
    assert {e["run_id"] for e in published.values()} == {fault_run.run_id}
    assert all(e["status"] == "passed" and e["defects_remaining"] == 0 for e in published.values())


def test_the_spark_steps_ran_as_spark_connect_clients(fault_run, airflow_home):
    """Each Spark step is its own task, run in the task's process against the long-running
    server: no spark-submit, no JVM start per step."""
    assert fault_run.returncode == 0, fault_run.output[-3000:]
    url = airflow_home.env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]
    assert '"conn_type": "spark_connect"' in url
    assert "Spark Connect sc://127.0.0.1:" in fault_run.output
    for step in ("compact", "reconcile", "backfill", "verify"):
        assert f": {step} --work " in fault_run.output, step
    assert "Spark-Submit cmd" not in fault_run.output


def test_the_run_s_spark_tasks_share_one_session_that_finish_run_releases(fault_run, airflow_home):
    """start_run draws the run's Spark Connect session; the Spark steps and the checkpoint join
    it (the catalog attached once), and the teardown releases it on the server."""
    from pyspark.sql.connect.session import SparkSession

    assert fault_run.returncode == 0, fault_run.output[-3000:]
    joined = re.findall(r"sc://127\.0\.0\.1:\d+/;session_id=([0-9a-f-]{36})", fault_run.output)
    assert len(joined) == 6, joined  # compact, reconcile, two backfills, verify, quality
    [session] = set(joined)
    conn = json.loads(airflow_home.env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
    spark = SparkSession.builder.remote(
        f"sc://{conn['host']}:{conn['port']}/;session_id={session}"
    ).create()
    try:
        with pytest.raises(Exception, match="SESSION_CLOSED"):
            spark.conf.get("spark.sql.session.timeZone")
    finally:
        spark.release_session_on_close = False
        spark.stop()


def test_the_full_audit_dag_agrees_with_the_incremental_run(fault_run, airflow_home, pg_url):
    """The on-demand audit re-judges all history and finds what the run found."""
    assert fault_run.returncode == 0, fault_run.output[-3000:]
    out = airflow_home.run("dags", "test", "audit_full", "2025-06-01T13:00:00+00:00", timeout=600)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-4000:]
    assert "agrees with the incremental runs" in output
    house = Layout("", str(fault_run.warehouse), "")
    assert readers.scan(readers.load(house, pg_url, "audit_summary")).num_rows > 0
