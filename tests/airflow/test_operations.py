"""Airflow as operators run it: a real scheduler (LocalExecutor) and API server on a port that
is not 8080, set by the one setting ``AUDITSYNC_AIRFLOW_PORT``, running ``ops_dags/ops_probe``
(wired like audit_sync) once:

* every task reaches the execution API on that port (none fails with a ConnectError);
* a refused PostgreSQL connection is retried (with backoff) and the retry succeeds; a verdict
  (``AirflowFailException``) and a bug fail on their first try, retries unused;
* the sink sensor times out and the webhook receives which consumer lags on which topic, by
  how many seqs;
* the run is not finished by its deadline: the deadline alert reaches the webhook through the
  executor's callback, once.
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from watch_service.settings import Settings
from watch_service.tools.airflow_env import airflow_env

from ..support import free_port, stop, unique
from .conftest import AirflowHome, http_json, pg_rows, wait_until
from .live import ok, start
from .receivers import WebhookReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.timeout(600)]
HERE = Path(__file__).resolve().parent
LEDGER = "SELECT kind, channel FROM alerts_sent WHERE dag_id = 'ops_probe' AND run_id = %s"
PROBE_PRELOAD = (
    "airflow.executors.local_executor",
    "airflow.sdk.execution_time.supervisor",
    "airflow.sdk.execution_time.task_runner",
    "airflow.providers.standard.operators.python",
    "auditsync_plugin.deadlines",
    "auditsync_plugin.notifications.notifiers",
)


def dag_run(db: Path) -> tuple[str, str] | None:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = 'ops_probe' ORDER BY id DESC"
        ).fetchone()


@pytest.fixture(scope="module")
def ops_run(pg_url, watch_service, tmp_path_factory):
    local = tmp_path_factory.mktemp("ops-airflow")
    port = free_port()
    # A topic with 9 records and a sink whose cursor stopped at 3.
    topic = unique("lagged")
    http_json("PUT", f"{watch_service.url}/v0/topics/{topic}", {})
    http_json(
        "POST",
        f"{watch_service.url}/v0/topics/{topic}/records",
        {"records": [{"data": {"n": i}} for i in range(9)]},
    )
    landing = local / "landing"
    (landing / "lagger").mkdir(parents=True)
    (landing / "lagger" / "state.json").write_text(
        json.dumps({"topics": [topic], "cursors": {topic: 3}})
    )
    release = local / "release"
    with WebhookReceiver() as hook:
        env = airflow_env(
            Settings(local_dir=local, database_url=pg_url),
            {
                "AUDITSYNC_WATCH_URL": watch_service.url,
                "AUDITSYNC_AIRFLOW_PORT": str(port),
                "AUDITSYNC_ALERT_WEBHOOK": hook.url("ops"),
            },
        )
        home = AirflowHome(
            local,
            {
                **os.environ,
                **env,
                "AIRFLOW__CORE__DAGS_FOLDER": str(HERE / "ops_dags"),
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                # The workers' fork server imports what the probe's tasks import, not the
                # pipeline's Spark client and Great Expectations (airflow_env's TASK_PRELOAD),
                # which no task here uses: about 5 CPU-s of imports for nothing.
                "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD": ",".join(PROBE_PRELOAD),
                "OPS_CLOSED_PORT": str(free_port()),
                "OPS_RELEASE_FILE": str(release),
                "OPS_LANDING": str(landing),
                "OPS_DEADLINE_S": "3",
            },
        )
        home.run("db", "migrate", check=True, timeout=180)
        home.run("dags", "reserialize", check=True, timeout=180)
        base = env["AIRFLOW__API__BASE_URL"]
        api = start(home, "api-server", "api-server", "-w", "1")
        scheduler = start(home, "scheduler", "scheduler", "--skip-serve-logs")
        try:
            wait_until(lambda: ok(f"{base}/api/v2/monitor/health"), 120, f"the API server {base}")
            # With a logical date, as a scheduled run has: the deadline is measured from it.
            now = datetime.now(UTC).isoformat(timespec="seconds")
            home.run("dags", "trigger", "ops_probe", "-l", now, check=True, timeout=120)
            db = local / "airflow" / "airflow.db"
            posts = hook.wait_for(lambda i: "not verified by" in i[1]["text"], 180, "deadline")
            release.write_text("go")
            wait_until(
                lambda: (dag_run(db) or ("", "running"))[1] not in ("queued", "running"),
                180,
                "the ops_probe run to finish",
            )
            run_id, state = dag_run(db) or ("", "")
            with sqlite3.connect(db) as conn:
                tis = {
                    t: (s, n)
                    for t, s, n in conn.execute(
                        "SELECT task_id, state, try_number FROM task_instance WHERE run_id = ?",
                        (run_id,),
                    )
                }
            yield {
                "port": port,
                "base": base,
                "env": env,
                "run_id": run_id,
                "state": state,
                "tis": tis,
                "deadline_posts": posts,
                "posts": list(hook.items),
                "topic": topic,
                "logs": local,
            }
        finally:
            stop(scheduler)
            stop(api)


def test_one_port_setting_reaches_every_task(ops_run):
    port = ops_run["port"]
    assert port != 8080
    assert ops_run["env"]["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == (
        f"http://127.0.0.1:{port}/execution/"
    )
    assert ops_run["tis"]["execution_api"] == ("success", 1), ops_run["tis"]
    assert ops_run["tis"]["hold"] == ("success", 1)


def test_faults_retry_and_findings_do_not(ops_run):
    tis = ops_run["tis"]
    assert tis["fault_then_ok"] == ("success", 2)  # refused once, retried, passed
    assert tis["verdict"] == ("failed", 1)  # AirflowFailException: no retry
    assert tis["bug"] == ("failed", 1)  # not transient: the policy fails it at once
    assert ops_run["state"] == "failed"


def test_the_lagging_sink_and_the_missed_deadline_alert_once(ops_run, pg_url):
    tis, topic = ops_run["tis"], ops_run["topic"]
    assert tis["lagging_sink"] == ("failed", 1)
    texts = [body["text"] for path, body in ops_run["posts"] if path == "/hook/ops"]
    [lag] = [t for t in texts if "sinks lag" in t]
    assert lag.splitlines()[0] == (
        f"[auditsync] ops_probe: sinks lag behind the service for run {ops_run['run_id']}: "
        "lagger (6 seqs behind)"
    )
    assert f"- lagger/{topic}: cursor 3, head 9, 6 seqs behind" in lag.splitlines()
    assert f"Reconciliation page (consumer lag): {ops_run['base']}/auditsync/" in lag
    [deadline] = [t for t in texts if "not verified by" in t]
    assert deadline.startswith("[auditsync] ops_probe: data interval ")
    assert f"Airflow run: {ops_run['run_id']}" in deadline.splitlines()
    assert sorted(pg_rows(pg_url, LEDGER, ops_run["run_id"])) == [
        ("deadline_missed", "webhook"),
        ("sink_lag", "webhook"),
    ]
