"""Four machines that share nothing but PostgreSQL and an S3 server on loopback.

The sink, the Spark Connect server, the Airflow worker (``airflow dags test``) and the Airflow
API server each run in their own mount namespace: a private tmpfs over ``/tmp``, ``/var/tmp``
and ``/dev/shm`` (their HOME, AIRFLOW_HOME, Spark's local dirs live there), and the checkout
with its venv mounted read-only. The landing zone, the Iceberg warehouse and the Great
Expectations results are ``s3://`` locations on the session's S3Proxy; the run tables, the
Iceberg catalog and Airflow's metadata (a database of its own) are in the session's PostgreSQL.
The watch service runs outside: it is the source side.

One scenario: the sink lands the stream with injected faults; the worker runs one interval of
``audit_sync``; the faults on record in the store equal the defects the run found, seq by seq;
the API server's Reconciliation page shows the run and its Data Docs open, read from the store.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from spark_jobs.common.statuses import DEFECTS, MISMATCH, SILENT_GAP
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.settings import Settings
from watch_service.sink.faults import CORRUPT, DROP
from watch_service.sink.landing import Landing
from watch_service.storage import Storage
from watch_service.tools.airflow_env import airflow_env

from ..airflow.conftest import (
    CONSUMER,
    FAULTS,
    SUMMARY_SQL,
    http_json,
    pg_rows,
    pipeline_run_id,
    wait_until,
)
from ..airflow.conftest import _append as append_records
from ..airflow.live import airflow_database
from ..conftest import TEST_BUCKET
from ..support import ROOT, ServiceProcess, free_port, spark_submit_opts, unique

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.s3, pytest.mark.timeout(900)]

BIN = Path(sys.executable).parent
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm")
DATE = "2025-06-03T12:05:00+00:00"  # interval [11:45, 12:00): no other test's run id
RUN_ID = pipeline_run_id("20250603T114500Z", "20250603T120000Z")
STATUS_OF = {DROP: SILENT_GAP, CORRUPT: MISMATCH}
SUITES = ("deliveries", "detail", "reconciliation", "remaining", "audit_log")


def isolated(name: str, argv: list[str]) -> list[str]:
    """``argv`` in a mount namespace of its own: a private tmpfs over each of PRIVATE, the
    checkout (and its venv) read-only, and ``/tmp/machine`` naming the machine."""
    mounts = "; ".join(f"mount -t tmpfs -o mode=1777 tmpfs {d}" for d in PRIVATE)
    stage = unstage = ""
    if any(ROOT.is_relative_to(d) for d in PRIVATE):
        # A checkout under /tmp (a CI clone, say) would vanish under the tmpfs: hold it at a
        # staging mount first, put it back in place after, and drop the staging mount.
        stage = f"mount -t tmpfs tmpfs /mnt; mkdir /mnt/co; mount --bind {ROOT} /mnt/co; "
        unstage = f"mkdir -p {ROOT}; mount --bind /mnt/co {ROOT}; umount /mnt/co; umount /mnt; "
    script = (
        f"set -e; {stage}{mounts}; {unstage}mount --bind {ROOT} {ROOT}; "
        f"mount -o remount,bind,ro {ROOT}; "
        # /tmp/machine last, whole (a rename): once it is there, the namespace is ready.
        f"mkdir -p /tmp/home; touch /tmp/only-{name}; "
        f'echo {name} > /tmp/machine.new; mv /tmp/machine.new /tmp/machine; exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, name, *argv]


@dataclasses.dataclass
class Machine:
    name: str
    proc: subprocess.Popen
    log: Path

    @classmethod
    def start(cls, name: str, argv: list[str], env: dict[str, str], logs: Path) -> Machine:
        log = logs / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                isolated(name, argv),
                env={**env, "HOME": "/tmp/home", "TMPDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd="/",
            )
        return cls(name, proc, log)

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{tail}")
        return True

    def sees(self, path: str) -> Path:
        """``path`` as this machine sees it (its mount namespace, through /proc)."""
        return Path(f"/proc/{self.proc.pid}/root{path}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def assert_separate(machines: list[Machine], hidden: list[Path]) -> None:
    """Each machine sees its own /tmp only: its marker, none of the others', none of them on
    the host's /tmp; and none sees the ``hidden`` folders (the store's and PostgreSQL's files,
    reached only over loopback)."""
    for m in machines:
        assert m.alive() and m.sees("/tmp/machine").read_text() == f"{m.name}\n"
        assert not Path(f"/tmp/only-{m.name}").exists()
        for other in machines:
            assert other.sees(f"/tmp/only-{m.name}").exists() == (other is m), (m.name, other.name)
        for folder in hidden:
            assert folder.is_dir() and not m.sees(str(folder)).exists(), (m.name, folder)


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def get(url: str, token: str) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), resp.read()


def defects_found(warehouse: str, pg_url: str) -> set[tuple[str, int, str]]:
    """(topic, seq, status) of every defect in the run's reconcile detail (Iceberg)."""
    from pyiceberg.expressions import EqualTo

    table = readers.load(Layout("", warehouse, ""), pg_url, "detail")
    rows = readers.scan(table, row_filter=EqualTo("run_id", RUN_ID)).to_pylist()
    return {
        (r["topic"], seq, r["status"])
        for r in rows
        if r["consumer"] == CONSUMER and r["status"] in DEFECTS
        for seq in range(r["seq"], (r["seq_to"] or r["seq"]) + 1)
    }


def test_four_machines_share_only_postgresql_and_the_object_store(
    pg_url, pg_cluster, object_store, tmp_path
):
    started = time.monotonic()
    hidden = [Path(pg_cluster.data_dir), object_store.root]
    laps: dict[str, float] = {}

    def lap(name: str) -> None:
        laps[name] = time.monotonic() - started
        print(f"four machines: {name} at {laps[name]:.1f} s", flush=True)

    root = f"s3://{TEST_BUCKET}/{unique('four')}"
    landing, warehouse, gx_root = (f"{root}/{x}" for x in ("landing", "warehouse", "gx"))
    s3_env = object_store.config.environ()
    base_env = {
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "LANG": "C.UTF-8",
        "SPARK_SUBMIT_OPTS": spark_submit_opts(),  # the tests' Spark defaults, on every machine
        **s3_env,
    }
    watch = ServiceProcess(
        pg_url, env={"AUDITSYNC_RETENTION_INTERVAL_S": "3600"}, log_path=tmp_path / "serve.log"
    ).start()
    machines: list[Machine] = []
    try:
        connect_port, api_port = free_port(), free_port()
        spark_env = {**base_env, "PYSPARK_PYTHON": sys.executable}
        spark = Machine.start(
            "spark-connect",
            [str(BIN / "auditsync"), "spark-connect", "serve", "--port", str(connect_port),
             "--master", "local[2]", "--driver-memory", "1g"],
            {**spark_env, "PYSPARK_DRIVER_PYTHON": sys.executable},
            tmp_path,
        )  # fmt: skip
        machines.append(spark)
        env = {
            **base_env,
            **airflow_env(
                Settings(local_dir=Path("/tmp/auditsync"), database_url=pg_url),
                {
                    "AUDITSYNC_WATCH_URL": watch.url,
                    "AUDITSYNC_SPARK_MASTER": "local[2]",
                    "AUDITSYNC_SPARK_CONNECT": f"sc://127.0.0.1:{connect_port}",
                    "AUDITSYNC_SENSOR_TIMEOUT_S": "120",
                    "AUDITSYNC_LANDING": landing,
                    "AUDITSYNC_WAREHOUSE": warehouse,
                    "AUDITSYNC_GX_ROOT": gx_root,
                    "AUDITSYNC_AIRFLOW_PORT": str(api_port),
                },
            ),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_database(pg_url),
        }
        airflow = str(BIN / "airflow")
        api = Machine.start(
            "api-server",
            ["sh", "-c", f'mkdir -p "$AIRFLOW_HOME" && {airflow} db migrate && exec {airflow} '
             f"api-server -H 127.0.0.1 -p {api_port} -w 1"],
            env,
            tmp_path,
        )  # fmt: skip
        machines.append(api)
        topics = {unique("orders"): 300, unique("payments"): 200}
        for topic, count in topics.items():
            http_json("PUT", f"{watch.url}/v0/topics/{topic}", {})
            append_records(watch.url, topic, count)
        sink = Machine.start(
            "sink",
            [sys.executable, "-m", "watch_service.sink", "--url", watch.url,
             "--topics", ",".join(topics), "--consumer", CONSUMER, "--landing", landing,
             "--database-url", pg_url, "--heartbeat-ms", "1000", "--flush-ms", "100",
             "--flush-rows", "150", *FAULTS],
            base_env,
            tmp_path,
        )  # fmt: skip
        machines.append(sink)
        store = Storage.at(landing, object_store.config)

        def caught_up() -> bool:
            sink.alive()
            raw = store.read_bytes(f"{CONSUMER}/state.json")
            cursors = json.loads(raw).get("cursors", {}) if raw else {}
            return all(cursors.get(t, 0) >= n for t, n in topics.items())

        wait_until(caught_up, 90, "the sink to land every record")
        lap("sink caught up")

        base = f"http://127.0.0.1:{api_port}"
        wait_until(lambda: api.alive() and accepts(api_port), 240, "the API server")
        wait_until(lambda: spark.alive() and accepts(connect_port), 120, "Spark Connect")
        lap("api server and spark connect up")

        worker = Machine.start(
            "worker",
            ["sh", "-c", f'mkdir -p "$AIRFLOW_HOME" && exec {airflow} dags test audit_sync {DATE}'],
            env,
            tmp_path,
        )
        machines.append(worker)
        wait_until(lambda: worker.sees("/tmp/machine").exists(), 30, "the worker's namespace")
        assert_separate(machines, hidden)
        assert worker.proc.wait(600) == 0, worker.log.read_text(errors="replace")[-5000:]
        lap("dag run done")
        assert "data quality PASSED" in worker.log.read_text(errors="replace")

        # The faults the sink put on record in the store are the defects the run found.
        faults = Landing(store, CONSUMER).load_faults()
        assert {k for k, _, _ in faults} == {DROP, CORRUPT}
        expected = {(topic, seq, STATUS_OF[kind]) for kind, topic, seq in faults}
        assert defects_found(warehouse, pg_url) == expected
        summary = pg_rows(pg_url, SUMMARY_SQL, RUN_ID)
        per_status = {(t, s): (n, left) for _, t, s, n, left, _ in summary if s in DEFECTS}
        assert per_status == {
            (t, s): (sum(1 for x in expected if x[0] == t and x[2] == s), 0) for t, _, s in expected
        }
        assert pg_rows(
            pg_url,
            "SELECT status, defects_found, defects_remaining FROM pipeline_runs WHERE run_id = %s",
            RUN_ID,
        ) == [("passed", len(expected), 0)]

        # The API server shows the run and opens the Data Docs, from the store.
        passwords = json.loads(api.sees("/tmp/auditsync/airflow/passwords.json").read_text())
        login = {"username": "admin", "password": passwords["admin"]}
        token = http_json("POST", f"{base}/auth/token", login)["access_token"]
        status, _, body = get(f"{base}/auditsync/runs.json", token)
        lines = [x for x in json.loads(body)["runs"] if x["run_id"] == RUN_ID]
        assert status == 200 and {x["topic"] for x in lines} == set(topics)
        assert {x["run_status"] for x in lines} == {"passed"}
        assert sum(x["backfilled"] for x in lines) == len(expected)
        assert sum(x["defects_left"] for x in lines) == 0
        status, _, page = get(f"{base}/auditsync/", token)
        assert status == 200 and RUN_ID.encode() in page and b'href="docs/index.html"' in page
        status, kind, index = get(f"{base}/auditsync/docs/index.html", token)
        assert (status, kind.split(";")[0]) == (200, "text/html")
        assert all(suite.encode() in index for suite in SUITES)
        site = Storage.at(f"{gx_root}/gx/uncommitted/data_docs/local_site", object_store.config)
        pages = [n for n, _ in site.files("validations", recursive=True) if n.endswith(".html")]
        assert {p.split("/")[0] for p in pages} == set(SUITES)
        status, _, report = get(f"{base}/auditsync/docs/validations/{pages[0]}", token)
        assert status == 200 and pages[0].split("/")[0].encode() in report
        css = "static/styles/data_docs_default_styles.css"
        assert get(f"{base}/auditsync/docs/{css}", token)[:2] == (200, "text/css; charset=utf-8")
        assert_separate([m for m in machines if m is not worker], hidden)
        lap("all checked")
    finally:
        for m in reversed(machines):
            m.stop()
        watch.stop()
