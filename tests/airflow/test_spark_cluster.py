"""The pipeline's Spark jobs, submitted by the DAG through ``spark_default`` to a real Spark
standalone cluster (master + one worker on loopback, from the pyspark installation), give the
same results as the ``local[2]`` run of the same data interval."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request

import pytest

from spark_jobs import readers
from spark_jobs.layout import Layout

from ..support import free_port
from .conftest import BIN, FAULT_DATE, SUMMARY_SQL, dags_test, pg_rows, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.timeout(900)]


def _master_state(ui_port: int) -> dict:
    with contextlib.suppress(OSError, ValueError):
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
            return json.loads(resp.read())
    return {}


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("spark-cluster")
    conf = base / "conf"
    conf.mkdir()
    props = conf / "master.properties"
    props.write_text("spark.master.rest.enabled false\n")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONF_DIR": str(conf),
        "SPARK_WORKER_DIR": str(base / "work"),
        "SPARK_LOCAL_DIRS": str(base / "local"),
        "SPARK_DAEMON_MEMORY": "256m",
    }
    port, ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []
    try:
        with open(base / "master.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "spark-class"),
                        "org.apache.spark.deploy.master.Master",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--webui-port",
                        str(ui),
                        "--properties-file",
                        str(props),
                    ],
                    env=env,
                    stdout=log,
                    stderr=log,
                )
            )
        with open(base / "worker.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "spark-class"),
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(worker_ui),
                        "--work-dir",
                        str(base / "work"),
                    ],
                    env=env,
                    stdout=log,
                    stderr=log,
                )
            )
        wait_until(lambda: _master_state(ui).get("aliveworkers", 0) >= 1, 90, "a live Spark worker")
        yield url, ui
    finally:
        for proc in reversed(procs):  # stopped by PID, worker first
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _rows(warehouse, url, name, columns):
    table = readers.scan(readers.load(Layout("", str(warehouse), ""), url, name))
    return sorted(zip(*(table[c].to_pylist() for c in columns)), key=repr)


def test_the_cluster_gives_the_local_results(
    fault_run, spark_cluster, airflow_home, pg_url, tmp_path
):
    assert fault_run.returncode == 0, fault_run.output[-3000:]
    url, ui = spark_cluster
    run = dags_test(
        airflow_home,
        FAULT_DATE,
        fault_run.run_id,
        warehouse=tmp_path / "warehouse",
        extra_env={
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": url}),
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
        # Only the Spark jobs: the sink wait and the checkpoint do not touch the cluster.
        extra_args=("--mark-success-pattern", "wait_for_sinks|quality|publish"),
        spark_connect=False,
    )
    assert run.returncode == 0, run.output[-5000:]
    assert f"--master {url}" in run.output
    # Every Spark job of the run was an application of the standalone master.
    apps = [a["name"] for a in _master_state(ui).get("completedapps", [])]
    assert len(apps) == 5, apps  # compact, reconcile, 2 × backfill, verify
    # Same run id (same data interval): the rerun replaced the rows with identical ones.
    assert pg_rows(pg_url, SUMMARY_SQL, run.run_id) == fault_run.facts["summary"]
    summary = ["consumer", "topic", "status", "count"]
    assert _rows(run.warehouse, pg_url, "summary", summary) == _rows(
        fault_run.warehouse, pg_url, "summary", summary
    )
    audit = ["topic", "seq", "ts", "tag", "data", "data_sha256", "origin"]
    assert _rows(run.warehouse, pg_url, "audit_log", audit) == _rows(
        fault_run.warehouse, pg_url, "audit_log", audit
    )
