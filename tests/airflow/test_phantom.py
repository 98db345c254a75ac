"""The phantom runs of ``conftest.py``: a landing zone with one delivery of a seq that never
existed, a defect no backfill repairs, so verify fails the run. Its data interval runs twice:

* as one ``spark-submit`` per Spark step through ``spark_default`` to a real Spark standalone
  cluster (master + one worker on loopback, from the pyspark installation), whose failure
  message ends with the job's verdict;
* on the Spark Connect server, into a fresh warehouse, same pipeline run id.

Both fail verify the same way and give the same verdicts, summary, detail and audit log (the
cluster gives the local results); each failure alerts once per channel; the Reconciliation
page's rows show the run failed with its one defect left. Under ``pytest -n`` they run on the
worker of the fault run's unit, sharing its Airflow home, landing and server
(``tests/conftest.py``)."""

from __future__ import annotations

import re

import pytest

from auditsync_plugin.ui import runs as ui_runs
from spark_jobs.common.jars import jars_dir
from spark_jobs.common.statuses import DEFECTS, REPAIRABLE
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout

from ..browser import artifact
from .conftest import CONSUMER, SUMMARY_SQL, pg_rows
from .receivers import LEDGER, html_of, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1800)]
BACKFILL = ["backfill_audit_log", "backfill_search_index"]


def test_a_phantom_delivery_fails_verify_with_a_readable_message(phantom_run, pg_url):
    topic, seq = phantom_run.facts["phantom"]
    assert phantom_run.returncode != 0
    assert phantom_run.states["verify"] == "failed"
    assert all(phantom_run.states[b] == "success" for b in BACKFILL)
    assert phantom_run.states["quality"] == phantom_run.states["publish"] == "upstream_failed"
    # The verdict is in the task log and ends the failure message itself.
    failure = phantom_run.output[phantom_run.output.index("Cannot execute:") :]
    verdict = failure[failure.index("Last spark-submit output:") :]
    assert "defects remain after backfill" in verdict
    line = next(x for x in verdict.splitlines() if "phantom" in x)
    assert topic in line and f"e.g. seq {seq}" in line
    rows = pg_rows(pg_url, SUMMARY_SQL, phantom_run.run_id)
    assert [(t, s, left, ex) for _, t, s, _, left, ex in rows if left] == [
        (topic, "phantom", 1, [seq])
    ]
    [(status,)] = pg_rows(
        pg_url, "SELECT status FROM pipeline_runs WHERE run_id = %s", phantom_run.run_id
    )
    assert status == "failed"


def test_a_phantom_fails_verify_on_spark_connect_too(phantom_connect_run, pg_url):
    topic, seq = phantom_connect_run.facts["phantom"]
    assert phantom_connect_run.returncode != 0
    states = phantom_connect_run.states
    assert states["verify"] == "failed" and all(states[b] == "success" for b in BACKFILL)
    assert states["quality"] == states["publish"] == "upstream_failed"
    failure = phantom_connect_run.output[
        phantom_connect_run.output.index("Spark step verify did not pass (Spark Connect sc://") :
    ]
    assert "defects remain after backfill" in failure
    line = next(x for x in failure.splitlines() if "phantom" in x and "e.g. seq" in x)
    assert topic in line and f"e.g. seq {seq}" in line
    [(status,)] = pg_rows(
        pg_url, "SELECT status FROM pipeline_runs WHERE run_id = %s", phantom_connect_run.run_id
    )
    assert status == "failed"


def test_a_failed_verify_alerts_once_even_when_its_interval_runs_again(
    phantom_run, phantom_connect_run, alert_receivers, pg_url
):
    """The phantom's interval runs twice (spark-submit, then Spark Connect; ``dags test`` gives
    each its own Airflow run id): verify fails both times, each failure sent once per channel."""
    smtp, hook = alert_receivers
    topic, seq = phantom_run.facts["phantom"]
    assert phantom_run.states["verify"] == phantom_connect_run.states["verify"] == "failed"
    prefix = f"[auditsync] audit_sync: verify failed for run {phantom_run.run_id}"
    mails = smtp.wait_for(lambda m: m["Subject"].startswith(prefix), 30, "the verify e-mail")
    posts = hook.wait_for(lambda i: i[1]["text"].startswith(prefix), 30, "the verify webhook")
    ledger = [r for r in pg_rows(pg_url, LEDGER) if r[1] == "verify_failed"]
    runs = {r[0] for r in ledger}
    assert sorted(ledger) == sorted(
        (r, "verify_failed", c) for r in runs for c in ("email", "webhook")
    )
    assert len(mails) == len(posts) == len(runs)  # once per Airflow run and channel
    for mail, (_, body) in zip(mails, posts):
        assert mail["Subject"].endswith("defects remain after backfill")
        line = f"- {CONSUMER}/{topic} phantom: found 1, left 1"
        assert any(
            x.startswith(line) and x.endswith(f"still defective {seq}")
            for x in body["text"].splitlines()
        )
        assert f"<td>{seq}</td>" in html_of(mail)
    screenshot(html_of(mails[0]), artifact("alert-email-verify-failed.png"))


def _rows(warehouse, url, name, columns):
    table = readers.scan(readers.load(Layout("", str(warehouse), ""), url, name))
    return sorted(zip(*(table[c].to_pylist() for c in columns)), key=repr)


def test_the_cluster_gives_the_spark_connect_results(phantom_run, phantom_connect_run, pg_url):
    url, apps = phantom_run.facts["cluster"]
    assert f"--master {url}" in phantom_run.output
    # Every Spark job of the run was an application of the standalone master.
    assert len(apps) == 5, apps  # compact, reconcile, 2 × backfill, verify
    # The worker holds the pinned jars (AUDITSYNC_SPARK_WORKER_JARS): its executors loaded
    # them from there, none fetched a copy from its driver.
    assert phantom_run.facts["executor_jars"] == []
    # Each step's session asked the executors first whether they load them (a worker without
    # them stops the step there: tests/spark/test_worker_jars.py).
    said = re.compile(
        rf"\[session\] executors on \S+ load the pinned jars from {re.escape(str(jars_dir()))} "
    )
    logged = [x for x in phantom_run.output.splitlines() if "SparkSubmitHook" in x]
    assert sum(bool(said.search(x)) for x in logged) == 5, logged
    assert "on the driver's and workers' paths" in phantom_run.output
    assert "--jars" not in phantom_run.output.split("Spark-Submit cmd", 1)[1].splitlines()[0]
    assert "Spark-Submit cmd" not in phantom_connect_run.output
    # Same run id (same data interval): the Spark Connect run replaced the cluster run's rows
    # with identical ones.
    assert pg_rows(pg_url, SUMMARY_SQL, phantom_run.run_id) == phantom_run.facts["summary"]
    summary = ["consumer", "topic", "status", "count"]
    assert _rows(phantom_run.warehouse, pg_url, "summary", summary) == _rows(
        phantom_connect_run.warehouse, pg_url, "summary", summary
    )
    detail = ["consumer", "topic", "status", "seq", "seq_to", "source_hash", "delivered_hash"]
    assert _rows(phantom_run.warehouse, pg_url, "detail", detail) == _rows(
        phantom_connect_run.warehouse, pg_url, "detail", detail
    )
    audit = ["topic", "seq", "ts", "tag", "data", "data_sha256", "origin"]
    assert _rows(phantom_run.warehouse, pg_url, "audit_log", audit) == _rows(
        phantom_connect_run.warehouse, pg_url, "audit_log", audit
    )


def test_the_reconciliation_rows_show_the_failed_run(phantom_run, pg_url):
    """What the Reconciliation page and ``runs.json`` serve (the plugin's own reads)."""
    rows, _ = ui_runs.fetch({"conninfo": pg_url})
    lines = [x for x in ui_runs.pivot(rows, REPAIRABLE, DEFECTS) if x.run_id == phantom_run.run_id]
    assert lines and {x.run_status for x in lines} == {"failed"}
    assert sum(x.defects_left for x in lines) == 1
