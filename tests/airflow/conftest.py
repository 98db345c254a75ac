"""Shared setup of the Airflow layer, built once per session because every piece is slow:

* the plugin on ``sys.path`` (as Airflow puts it) for the in-process pure tests;
* ``spark_connect``: the project's Spark Connect server (``auditsync spark-connect``), which
  the DAG's Spark steps and the quality checkpoint use as clients;
* ``airflow_home``: an Airflow home with the environment ``airflow_env`` computes for this
  project (embedded defaults: SQLite metadata, Spark ``local[2]``, the ``spark_connect_default``
  connection to that server), migrated once; its CLI commands fork from a server that imported
  Airflow once (``cli_server``);
* ``landing``: the real watch service (its own process) with three topics — one capped and
  trimmed by the ``retention`` DAG, so the sink sees a tombstone — and the real sink (its own
  process, with fault injection: dropped and corrupted records) writing a landing zone until
  its cursors reach the heads;
* the audit_sync DAG runs with ``airflow dags test`` on that landing zone, which the e2e,
  alert, Spark-cluster and browser tests all read: the fault run (Spark Connect), the phantom
  run (spark-submit to a Spark standalone cluster) and the phantom's interval again on Spark
  Connect.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from watch_service.protocol.tlog import note
from watch_service.settings import Settings
from watch_service.sink.faults import FaultPolicy
from watch_service.tools import spark_connect as spark_connect_server
from watch_service.tools.airflow_env import airflow_env

from ..support import ServiceProcess, free_port, unique
from .cli_server import CliServer
from .receivers import SmtpReceiver, WebhookReceiver
from .spark_cluster import standalone_cluster

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "plugins") not in sys.path:
    sys.path.insert(0, str(ROOT / "plugins"))

BIN = Path(sys.executable).parent
CONSUMER = "primary"
CONNECT_CONN = "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"
LOG_KEY_CONN = "AIRFLOW_CONN_AUDITSYNC_LOG_KEY"
LOG_SIGNER = note.Signer.generate("auditsync.test/airflow")
OL_NAMESPACE, OL_EVENTS = "auditsync-test", "openlineage.jsonl"
FAULT_POLICY = FaultPolicy(drop_fraction=0.03, corrupt=2, seed=11)
FAULTS = [
    *("--fault-drop-fraction", str(FAULT_POLICY.drop_fraction)),
    *("--fault-corrupt", str(FAULT_POLICY.corrupt)),
    *("--fault-seed", str(FAULT_POLICY.seed)),
]


# audit_sync's tasks in the DAG's order (what a passed run's task states name).
AUDIT_SYNC_TASKS = (
    "wait_for_sinks",
    "start_run",
    "compact",
    "reconcile",
    "backfill_audit_log",
    "backfill_search_index",
    "verify",
    "quality",
    "publish",
    "finish_run",
)


def first_record_dropped(prefix: str) -> str:
    """A unique topic name whose seq 1 the sink drops under ``FAULTS``. Subscribed first, its
    seq 1 is the first item of the consumer's very first frame: the loss only the segment
    footer's session start (``before_frame_id``) keeps in reconcile's scope."""
    while not FAULT_POLICY.drops(name := unique(prefix), 1):
        pass
    return name


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> object:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``. The polls
    start 50 ms apart and back off to one a second: the live module waits minutes on
    predicates that query Airflow's database, and at 20 polls a second those queries took a
    share of the two cores the runs they wait for need."""
    deadline = time.monotonic() + timeout
    pause = 0.05
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 1.5, 1.0)


def http_json(method: str, url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@dataclasses.dataclass
class AirflowHome:
    local: Path
    env: dict[str, str]
    # The home's commands forked from a server that imported Airflow once (``cli_server``);
    # None: each command is a process of its own.
    cli: CliServer | None = None

    def run(
        self,
        *args: str,
        timeout: float = 300,
        extra_env: dict | None = None,
        check: bool = False,
        unset: tuple[str, ...] = (),
    ) -> subprocess.CompletedProcess:
        env = {k: v for k, v in {**self.env, **(extra_env or {})}.items() if k not in unset}
        if self.cli is not None and self.cli.serves(env):
            out = self.cli.run(list(args), env, self.local, timeout)
        else:
            out = subprocess.run(
                [str(BIN / "airflow"), *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=self.local,
            )
        if check and out.returncode != 0:
            raise AssertionError(
                f"airflow {' '.join(args)} exited {out.returncode}:\n"
                f"{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
            )
        return out

    @property
    def landing(self) -> Path:
        return Path(self.env["AIRFLOW_VAR_AUDITSYNC_LANDING"])

    @property
    def warehouse(self) -> Path:
        return Path(self.env["AIRFLOW_VAR_AUDITSYNC_WAREHOUSE"])

    @property
    def gx_root(self) -> Path:
        return Path(self.env["AIRFLOW_VAR_AUDITSYNC_GX_ROOT"])


@pytest.fixture(scope="session")
def watch_service(pg_url, tmp_path_factory):
    logs = tmp_path_factory.mktemp("watch-log")
    # Retention only when the retention DAG runs it, so the test controls when trims happen.
    svc = ServiceProcess(
        pg_url, env={"AUDITSYNC_RETENTION_INTERVAL_S": "3600"}, log_path=logs / "serve.log"
    ).start()
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """The Spark Connect server, started in the background (it comes up while the Airflow
    home migrates and the sink fills the landing zone) and stopped by its pid at the end."""
    settings = Settings(local_dir=tmp_path_factory.mktemp("spark-connect"))
    state = spark_connect_server.start(
        settings, port=free_port(), master="local[2]", driver_memory="1g", timeout_s=None
    )
    yield settings, state
    spark_connect_server.terminate(state.pid)


@pytest.fixture(scope="session")
def alert_receivers():
    """A real SMTP server and a webhook receiver on loopback, which the DAG runs alert."""
    with SmtpReceiver() as smtp, WebhookReceiver() as hook:
        yield smtp, hook


@pytest.fixture(scope="session")
def airflow_home(
    pg_url, watch_service, spark_connect, alert_receivers, tmp_path_factory
) -> Iterator[AirflowHome]:
    local = tmp_path_factory.mktemp("airflow-local")
    connect_settings, connect = spark_connect
    env = airflow_env(
        Settings(local_dir=local, database_url=pg_url),
        {
            "AUDITSYNC_WATCH_URL": watch_service.url,
            "AUDITSYNC_SPARK_MASTER": "local[2]",
            "AUDITSYNC_SENSOR_TIMEOUT_S": "120",
            "AUDITSYNC_SPARK_CONNECT": connect.url,
            "AUDITSYNC_ALERT_EMAIL": "ops@example.com",
            "AUDITSYNC_ALERT_SMTP": alert_receivers[0].url,
            "AUDITSYNC_ALERT_WEBHOOK": alert_receivers[1].url(),
        },
    )
    full = {
        **os.environ,
        **env,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # verify signs each topic's audit log with this connection's password (issue 33)
        LOG_KEY_CONN: json.dumps({"conn_type": "generic", "password": str(LOG_SIGNER)}),
        # every run's OpenLineage events, one JSON a line, through OpenLineage's own file
        # transport (tests/airflow/test_lineage.py reads them)
        "AIRFLOW__OPENLINEAGE__NAMESPACE": OL_NAMESPACE,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(local / OL_EVENTS), "append": True}
        ),
    }
    # Its imports go on while the Spark Connect server starts and the landing fills.
    home = AirflowHome(local, full, CliServer(full, local))
    try:
        # a bound against a hang, not a target: about 3 s alone, over 180 s at load 24-30
        # (three workers' homes migrating at once on a machine shared with other suites)
        home.run("db", "migrate", check=True, timeout=900)
        spark_connect_server.wait_ready(connect_settings, connect)
        yield home
    finally:
        assert home.cli is not None
        home.cli.stop()


@dataclasses.dataclass
class Landing:
    topics: dict[str, int]  # topic -> head_seq when the sink caught up
    capped: str
    retention_output: str
    faults: dict[str, int]


def _append(url: str, topic: str, count: int, batch: int = 100) -> None:
    for start in range(0, count, batch):
        n = min(batch, count - start)
        http_json(
            "POST",
            f"{url}/v0/topics/{topic}/records",
            {
                "records": [
                    {
                        "data": {"n": start + i, "text": f"{topic} record {start + i}"},
                        "tag": f"k{(start + i) % 37}",
                        "meta": {"writer": "e2e"},
                    }
                    for i in range(n)
                ]
            },
        )


@pytest.fixture(scope="session")
def landing(airflow_home, watch_service, pg_url) -> Landing:
    url = watch_service.url
    plain, other, capped = first_record_dropped("orders"), unique("payments"), unique("capped")
    for topic, cfg in ((plain, {}), (other, {}), (capped, {"max_records": 50})):
        http_json("PUT", f"{url}/v0/topics/{topic}", cfg)
    _append(url, plain, 400)
    _append(url, other, 300)
    _append(url, capped, 120)
    # The retention DAG trims the capped topic to its last 50 and records the gap [1, 70].
    # (a bound against a hang, not a target: on a shared machine at load 11-12 this run took
    # over 240 s, while alone it takes about 15 s)
    out = airflow_home.run("dags", "test", "retention", "2025-06-01T12:00:00+00:00", timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    heads = {t["topic"]: t["head_seq"] for t in http_json("GET", f"{url}/v0/topics")["topics"]}
    assert http_json("GET", f"{url}/v0/topics/{capped}")["earliest_seq"] == 71

    root = airflow_home.landing
    sink_log = open(airflow_home.local / "sink.log", "wb")
    sink = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "watch_service.sink",
            "--url",
            url,
            "--topics",
            f"{plain},{other},{capped}",
            "--consumer",
            CONSUMER,
            "--landing",
            str(root),
            "--database-url",
            pg_url,
            "--heartbeat-ms",
            "1000",
            "--flush-ms",
            "100",
            "--flush-rows",
            "150",
            *FAULTS,
        ],
        stdout=sink_log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    state = root / CONSUMER / "state.json"
    wanted = {t: heads[t] for t in (plain, other, capped)}

    def caught_up() -> bool:
        if sink.poll() is not None:
            raise AssertionError(
                f"sink exited {sink.returncode}: "
                f"{(airflow_home.local / 'sink.log').read_text()[-2000:]}"
            )
        try:
            cursors = json.loads(state.read_text()).get("cursors", {})
        except (OSError, ValueError):
            return False
        return all(cursors.get(t, 0) >= h for t, h in wanted.items())

    try:
        wait_until(caught_up, 60, "the sink to reach every topic's head")
    finally:
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(20) == 0
        sink_log.close()
    from watch_service.sink.landing import Landing as SinkLanding
    from watch_service.storage import Storage

    faults = {"drop": 0, "corrupt": 0}
    for kind, _, _ in SinkLanding(Storage.at(root), CONSUMER).load_faults():
        faults[kind] += 1
    assert faults["drop"] > 0 and faults["corrupt"] > 0, faults
    return Landing(wanted, capped, out.stdout, faults)


# -- the audit_sync DAG, run with `airflow dags test` -------------------------------------------
FAULT_DATE = "2025-06-01T12:05:00+00:00"  # interval [11:45, 12:00)
PHANTOM_DATE = "2025-06-01T12:20:00+00:00"  # interval [12:00, 12:15)


def pipeline_run_id(start: str, end: str) -> str:
    return f"audit_sync_{start}_{end}"


@dataclasses.dataclass
class DagTest:
    returncode: int
    output: str
    seconds: float
    run_id: str
    states: dict[str, str]
    warehouse: Path
    landing: Path
    facts: dict = dataclasses.field(default_factory=dict)


def task_states(home: AirflowHome) -> dict[str, str]:
    """Task states of the newest audit_sync DAG run, from Airflow's metadata DB."""
    import sqlite3

    with sqlite3.connect(home.local / "airflow" / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = 'audit_sync' AND run_id = "
            "(SELECT run_id FROM dag_run WHERE dag_id = 'audit_sync' ORDER BY id DESC LIMIT 1)"
        )
        return dict(rows.fetchall())


def dags_test(
    home: AirflowHome,
    date: str,
    run_id: str,
    *,
    landing: Path | None = None,
    warehouse: Path | None = None,
    extra_env: dict | None = None,
    extra_args: tuple[str, ...] = (),
    spark_connect: bool = True,
    timeout: float = 900,
) -> DagTest:
    """One DAG run; ``spark_connect=False`` drops the Spark Connect connection, so every Spark
    step is a ``spark-submit`` through ``spark_default`` (the cluster path)."""
    landing = landing or home.landing
    warehouse = warehouse or home.warehouse
    env = {
        "AIRFLOW_VAR_AUDITSYNC_LANDING": str(landing),
        "AIRFLOW_VAR_AUDITSYNC_WAREHOUSE": str(warehouse),
        **(extra_env or {}),
    }
    started = time.monotonic()
    out = home.run(
        "dags",
        "test",
        "audit_sync",
        date,
        *extra_args,
        extra_env=env,
        timeout=timeout,
        unset=() if spark_connect else (CONNECT_CONN,),
    )
    output = out.stdout + out.stderr
    (home.local / f"dags-test-{run_id}-{int(started)}.log").write_text(output)
    return DagTest(
        out.returncode,
        output,
        time.monotonic() - started,
        run_id,
        task_states(home),
        warehouse,
        landing,
    )


def pg_rows(pg_url: str, sql: str, *params) -> list[tuple]:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        return conn.execute(sql, params).fetchall()


SUMMARY_SQL = """SELECT consumer, topic, status, count, remaining, example_seqs
                   FROM reconcile_summary WHERE run_id = %s ORDER BY 1, 2, 3"""


@pytest.fixture(scope="session")
def fault_run(airflow_home, landing, pg_url) -> DagTest:
    """The DAG on the faulty landing zone: finds the drops and corruptions, backfills them,
    passes verify and the checkpoint, publishes."""
    run = dags_test(
        airflow_home, FAULT_DATE, pipeline_run_id("20250601T114500Z", "20250601T120000Z")
    )
    run.facts["summary"] = pg_rows(pg_url, SUMMARY_SQL, run.run_id)
    return run


def write_phantom(consumer_dir: Path, topic: str, seq: int) -> None:
    """Append a landing segment holding a delivery of ``seq``, which was never written, in a
    frame whose cursor claims the topic reached it (as a lying or buggy server would)."""
    import pyarrow.parquet as pq

    from watch_service.protocol.landing import COLUMN_NAMES, KIND_RECORD, payload_hash
    from watch_service.sink.landing import Landing, rows_table
    from watch_service.storage import Storage

    last = Landing(Storage.at(consumer_dir.parent), consumer_dir.name).segments()[-1].last_frame_no
    data = '{"phantom":true}'
    row = {
        "consumer": consumer_dir.name,
        "frame_no": last + 1,
        "received_ms": int(time.time() * 1000),
        "kind": KIND_RECORD,
        "topic": topic,
        "cursor": seq,
        "seq": seq,
        "ts": int(time.time() * 1000),
        "data": data,
        "data_sha256": payload_hash(data),
    }
    table = rows_table([tuple(row.get(c) for c in COLUMN_NAMES)])
    pq.write_table(table, consumer_dir / f"part-{last + 1:012d}-{last + 1:012d}.parquet")


@pytest.fixture(scope="session")
def phantom_run(airflow_home, landing, pg_url, tmp_path_factory) -> DagTest:
    """A copy of the landing zone plus one delivery of a seq that never existed: a defect no
    backfill can repair, so verify fails the run. Without Spark Connect: every Spark step is a
    ``spark-submit`` through ``spark_default`` to a real Spark standalone cluster (its failure
    message ends with the job's verdict); ``facts["cluster"]`` holds the master's URL and the
    applications it completed, ``facts["summary"]`` the run's summary rows."""
    import shutil

    root = tmp_path_factory.mktemp("phantom") / "landing"
    shutil.copytree(airflow_home.landing, root, ignore=shutil.ignore_patterns(".lock"))
    topic = next(iter(landing.topics))
    phantom_seq = landing.topics[topic] + 7
    write_phantom(root / CONSUMER, topic, phantom_seq)
    from spark_jobs.common.jars import jars_dir

    base = tmp_path_factory.mktemp("spark-cluster")
    with standalone_cluster(base) as cluster:
        run = dags_test(
            airflow_home,
            PHANTOM_DATE,
            pipeline_run_id("20250601T120000Z", "20250601T121500Z"),
            landing=root,
            warehouse=root.parent / "warehouse",
            extra_env={
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                    {"conn_type": "spark", "host": cluster.url}
                ),
                # Ten short JVMs (a driver and an executor per step) get the tests' Spark
                # defaults from SPARK_SUBMIT_OPTS (tests/conftest.py): C1-only JIT roughly
                # halves the CPU they spend compiling.
                "SPARK_LOCAL_IP": "127.0.0.1",
                # The worker holds the pinned jars (it runs here): nothing is sent to it.
                "AUDITSYNC_SPARK_WORKER_JARS": str(jars_dir()),
            },
            spark_connect=False,
            timeout=1500,  # five spark-submits to a one-core cluster: 11 min at load 9-14
        )
        run.facts["cluster"] = (cluster.url, cluster.completed_apps())
        run.facts["executor_jars"] = sorted(p.name for p in (base / "work").rglob("*.jar"))
    run.facts["phantom"] = (topic, phantom_seq)
    run.facts["summary"] = pg_rows(pg_url, SUMMARY_SQL, run.run_id)
    return run


@pytest.fixture(scope="session")
def phantom_connect_run(airflow_home, phantom_run, tmp_path_factory) -> DagTest:
    """The phantom's data interval again (same pipeline run id, so its rows are replaced by
    identical ones), into a fresh warehouse, its Spark steps on the Spark Connect server: the
    gate fails the same way, the verdict in the failure message."""
    warehouse = tmp_path_factory.mktemp("phantom-connect") / "warehouse"
    run = dags_test(
        airflow_home,
        PHANTOM_DATE,
        phantom_run.run_id,
        landing=phantom_run.landing,
        warehouse=warehouse,
    )
    run.facts["phantom"] = phantom_run.facts["phantom"]
    return run
