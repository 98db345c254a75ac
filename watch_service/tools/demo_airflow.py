"""The pipeline half of ``make demo``: authorization writes, a sink with a little (loud) fault
injection, ``airflow dags test audit_sync``, and the summary a reader wants at the end.

Each step takes the demo's shared state (``watch_service.tools.demo.Demo``); see that module for the
log half (database, service, topics, writer, read-back).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psycopg

from watch_service.protocol.authz import change_topic
from watch_service.protocol.landing import STATE_FILE
from watch_service.settings import PROJECT_ROOT
from watch_service.sink.landing import Landing
from watch_service.storage import Storage
from watch_service.store import runs
from watch_service.tools import spark_connect
from watch_service.tools.airflow_env import airflow_env

CONSUMER = "demo"
FAULTS = ("--fault-drop-fraction", "0.01", "--fault-corrupt", "3", "--fault-seed", "7")
AUTHZ_WRITES = 20
SINK_TIMEOUT_S = 90.0
AIRFLOW_TIMEOUT_S = 600.0
TASK_START = re.compile(r"\[DAG TEST\] running task <TaskInstance: audit_sync\.(\w+) ")
TASK_STATE = re.compile(r"Task instance state updated.* new_state=(\w+)")


async def create_tenant(demo, http: aiohttp.ClientSession) -> None:
    """A tenant of its own: its change topic joins the demo's topics."""
    tenant = f"demo-{demo.run_id}"
    async with http.post(
        f"{demo.service_url}/v1/tenants/create", json={"id": tenant, "name": "auditsync demo"}
    ) as r:
        demo.check(r.status == 200, f"create tenant {tenant}: {r.status} {await r.text()}")
    schema = "entity user {}\nentity document {\n  relation viewer @user\n}"
    async with http.post(
        f"{demo.service_url}/v1/tenants/{tenant}/schemas/write", json={"schema": schema}
    ) as r:  # writes are validated against the tenant's schema, as Permify does
        demo.check(r.status == 200, f"schema of {tenant}: {r.status} {await r.text()}")
    demo.tenant = tenant
    demo.topics["authz"] = change_topic(tenant)


async def write_authz(demo, http: aiohttp.ClientSession, first: int) -> None:
    """Relationship writes through the Permify API: each one transaction and one change record."""
    tenant = demo.tenant
    for i in range(first, first + AUTHZ_WRITES):
        body = {
            "tuples": [
                {
                    "entity": {"type": "document", "id": f"doc-{i}"},
                    "relation": "viewer",
                    "subject": {"type": "user", "id": f"user-{i % 7}"},
                }
            ]
        }
        async with http.post(
            f"{demo.service_url}/v1/tenants/{tenant}/relationships/write", json=body
        ) as r:
            demo.check(r.status == 200, f"authz write {i}: {r.status} {await r.text()}")
    demo.say(
        "authz",
        f"tenant {tenant}: {AUTHZ_WRITES} relationship writes, one change record "
        f"each on topic {demo.topics['authz']}",
    )


async def read_heads(demo, http: aiohttp.ClientSession) -> dict[str, int]:
    heads = {}
    for short, topic in demo.topics.items():
        async with http.get(f"{demo.service_url}/v0/topics/{topic}") as r:
            heads[topic] = (await r.json())["head_seq"]
        demo.heads[short] = heads[topic]
    return heads


def start_sink(demo) -> None:
    demo.landing = Storage.at(demo.work_dir / "landing")
    log_path = demo.log_dir / "sink.log"
    with open(log_path, "ab") as log:
        demo.sink = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "watch_service.sink",
                "--url",
                demo.service_url,
                "--topics",
                ",".join(demo.topics.values()),
                "--consumer",
                CONSUMER,
                "--landing",
                demo.landing.uri(),
                "--database-url",
                demo.db_url,
                "--heartbeat-ms",
                "2000",
                "--progress-s",
                "2",
                *FAULTS,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
        )
    demo.say(
        "sink",
        f"pid {demo.sink.pid} consumer {CONSUMER!r} -> {demo.landing.uri()} "
        f"(FAULT INJECTION ON: drop 1 % of records, corrupt 3 payloads; log: {log_path})",
    )


def wait_for_sink(demo, heads: dict[str, int]) -> None:
    """Until the sink's durable cursors reach every topic's head."""
    deadline = time.monotonic() + SINK_TIMEOUT_S
    while True:
        demo.check(
            demo.sink.poll() is None,
            f"the sink exited with {demo.sink.returncode}; see {demo.log_dir / 'sink.log'}",
        )
        raw = demo.landing.read_bytes(f"{CONSUMER}/{STATE_FILE}")
        cursors = {} if raw is None else json.loads(raw).get("cursors", {})
        behind = {t: h - cursors.get(t, 0) for t, h in heads.items() if cursors.get(t, 0) < h}
        if not behind:
            break
        demo.check(
            time.monotonic() < deadline,
            f"the sink did not catch up within {SINK_TIMEOUT_S:.0f} s; behind: {behind}",
        )
        time.sleep(0.2)  # the sink is another process; its state file is all there is to watch
    demo.say(
        "sink",
        f"caught up: cursors at the heads of {len(heads)} topics ({sum(heads.values())} seqs)",
    )


def start_spark_connect(demo) -> tuple[spark_connect.ServerState | None, bool]:
    """The Spark Connect server the DAG's steps use: the one ``auditsync spark-connect start``
    left running, else one of the demo's own (starting while Airflow migrates). Returns it and
    whether the demo started it; (None, False) when it cannot, so the steps spark-submit."""
    running = spark_connect.read_state(demo.settings)
    if running:
        demo.say("spark", f"Spark Connect server pid {running.pid} at {running.url} (reused)")
        return running, False
    try:
        state = spark_connect.start(demo.settings, timeout_s=None)
    except spark_connect.SparkConnectError as exc:
        demo.say("spark", f"no Spark Connect server ({exc}); each step will spark-submit")
        return None, False
    demo.say(
        "spark",
        f"Spark Connect server pid {state.pid} at {state.url} (log: "
        f"{spark_connect.home(demo.settings) / 'server.log'})",
    )
    return state, True


def run_airflow(demo) -> None:
    """``airflow db migrate`` then ``airflow dags test audit_sync`` on the interval just ended,
    its Spark steps on a Spark Connect server (stopped afterwards if the demo started it)."""
    server, started = start_spark_connect(demo)
    try:
        _run_airflow(demo, server)
    finally:
        if started and server is not None:
            spark_connect.stop(demo.settings)
            demo.say("stop", f"Spark Connect server pid {server.pid} stopped")


def _run_airflow(demo, server: spark_connect.ServerState | None) -> None:
    env = airflow_env(
        demo.settings,
        {
            "AUDITSYNC_WATCH_URL": demo.service_url,
            "AUDITSYNC_SPARK_MASTER": "local[2]",
            "AUDITSYNC_LANDING": demo.landing.location.path,
            "AUDITSYNC_WAREHOUSE": str(demo.work_dir / "warehouse"),
            "AUDITSYNC_CONSUMERS": CONSUMER,
            "AUDITSYNC_SENSOR_TIMEOUT_S": "120",
            "AUDITSYNC_SPARK_CONNECT": server.url if server else "",
        },
    )
    demo.gx_root = Path(env["AIRFLOW_VAR_AUDITSYNC_GX_ROOT"])
    bin_dir = Path(sys.executable).parent
    full = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    log_path = demo.log_dir / "airflow.log"
    with open(log_path, "w") as log:
        migrated = subprocess.run(
            [str(bin_dir / "airflow"), "db", "migrate"],
            env=full,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=300,
        )
    demo.check(migrated.returncode == 0, f"airflow db migrate failed; see {log_path}")
    if server is not None:
        spark_connect.wait_ready(demo.settings, server)
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    logical = now - dt.timedelta(minutes=now.minute % 15 + 15)
    demo.say(
        "airflow",
        f"metadata DB ready; airflow dags test audit_sync {logical.isoformat()} (log: {log_path})",
    )
    with psycopg.connect(demo.db_url) as conn:
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        began = row[0]
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            [str(bin_dir / "airflow"), "dags", "test", "audit_sync", logical.isoformat()],
            env=full,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    demo.airflow_ok = _follow_tasks(demo, proc, log_path) == 0
    with psycopg.connect(demo.db_url) as conn:  # the DAG derives it from the data interval
        run_id = runs.latest_run_since(conn, began)
    demo.check(run_id is not None, f"the DAG recorded no pipeline run; see {log_path}")
    demo.pipeline_run = run_id


def _follow_tasks(demo, proc: subprocess.Popen, log_path: Path) -> int:
    """Print a line per task start and finish while ``airflow dags test`` runs."""
    seen, deadline, task = 0, time.monotonic() + AIRFLOW_TIMEOUT_S, "?"
    while True:
        done = proc.poll() is not None
        lines = log_path.read_text(errors="replace").splitlines()
        for line in lines[seen:]:
            started = TASK_START.search(line)
            if started:
                task = started.group(1)
                demo.say("airflow", f"{task:<22} running")
            finished = TASK_STATE.search(line)
            if finished and finished.group(1) != "running":
                demo.say("airflow", f"{task:<22} {finished.group(1)}")
        seen = len(lines)
        if done:
            return proc.returncode
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            return -1
        time.sleep(0.5)  # a child's log file is the only progress signal it gives


def summarize(demo) -> list[str]:
    """Figures from pipeline_runs / reconcile_summary and the sink's fault decisions."""
    faults = Landing(demo.landing, CONSUMER).load_faults()
    with psycopg.connect(demo.db_url) as conn:
        rows = [
            (t, s, n, left)
            for c, t, s, n, left, _ in runs.run_summary(conn, demo.pipeline_run)
            if c == CONSUMER
        ]
        found = runs.get_run(conn, demo.pipeline_run)
        run = None if found is None else found[:3]
    by_topic: dict[str, dict[str, tuple[int, int | None]]] = {}
    for topic, status, count, remaining in rows:
        by_topic.setdefault(topic, {})[status] = (count, remaining)
    lines = [
        f"{'topic':<40} {'written':>7} {'delivered':>9} {'dup':>4} {'tomb':>5} "
        f"{'gaps':>5} {'mism':>5} {'left':>5}"
    ]
    for short, topic in demo.topics.items():
        s = by_topic.get(topic, {})
        get = lambda k, s=s: s.get(k, (0, None))[0]  # noqa: E731
        left = sum((v[1] or 0) for v in s.values())
        lines.append(
            f"{topic:<40} {demo.heads.get(short, 0):>7} {get('delivered'):>9} "
            f"{get('duplicate'):>4} {get('tombstoned'):>5} {get('silent_gap'):>5} "
            f"{get('mismatch'):>5} {left:>5}"
        )
    drops = sum(kind == "drop" for kind, _, _ in faults)
    corrupt = sum(kind == "corrupt" for kind, _, _ in faults)
    found_gaps = sum(s.get("silent_gap", (0, 0))[0] for s in by_topic.values())
    found_mism = sum(s.get("mismatch", (0, 0))[0] for s in by_topic.values())
    lines.append(
        f"faults injected by the sink: {drops} dropped, {corrupt} corrupted; found by "
        f"reconcile: {found_gaps} silent gaps, {found_mism} mismatches"
        + (" (exact)" if (drops, corrupt) == (found_gaps, found_mism) else " (DIFFERENT)")
    )
    if run:
        lines.append(
            f"pipeline run {demo.pipeline_run}: {run[0]}; defects found {run[1]}, left after "
            f"backfill {run[2]}"
        )
    docs = demo.gx_root / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    lines.append(
        f"data quality (Great Expectations): {'PASSED' if demo.airflow_ok else 'FAILED'}; "
        f"Data Docs: {docs}"
    )
    demo.check(
        demo.airflow_ok, "the audit_sync DAG run failed; see " + str(demo.log_dir / "airflow.log")
    )
    demo.check(
        (drops, corrupt) == (found_gaps, found_mism),
        f"reconcile found {found_gaps} gaps / {found_mism} mismatches, injected {drops} / {corrupt}",  # noqa: E501
    )
    return lines


def terminate(proc: subprocess.Popen | None, timeout: float) -> bool:
    """SIGTERM a child we started (by its PID), kill it after ``timeout``; whether it ran."""
    if proc is None or proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return True


def stop_sink(demo) -> None:
    if terminate(demo.sink, 15):
        demo.say("stop", f"sink pid {demo.sink.pid} stopped")
