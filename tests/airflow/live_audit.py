"""``audit_sync`` under a live Airflow, for ``test_live_schedule.py``: the Airflow it runs
(``Live``: its processes, its REST API, its metadata), the first records landed by a sink with
fault injection, the operator's actions (a Spark Connect server killed under a step, the
scheduler stopped between two runs' judgements) and what the run tables and the landing zone
say a run must find."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import urllib.request
from pathlib import Path

import psycopg

from watch_service.settings import Settings
from watch_service.sink.faults import CORRUPT, DROP, corrupt_data
from watch_service.sink.landing import Landing
from watch_service.storage import Storage
from watch_service.store import runs as run_tables
from watch_service.tools import spark_connect as spark_connect_server

from ..sink.harness import SinkProcess
from ..support import stop
from .conftest import AirflowHome, http_json, pg_rows, wait_until
from .live import DagRun, Metadata, Writers, start
from .receivers import SmtpReceiver, WebhookReceiver

DAG = "audit_sync"
CONSUMER = "primary"
FAULTS = ["--fault-drop-fraction", "0.03", "--fault-corrupt", "2", "--fault-seed", "5"]
FIRST_RECORDS = 150  # per topic, landed by the faulty sink before Airflow starts
# Deadlines, not sleeps: a run takes 40-60 s on a quiet machine, several minutes when the
# machine's two cores are shared with the rest of the suite.
RUNS_TIMEOUT_S = 900
SPARK_JOB = re.compile(rb"INFO DAGScheduler: Got (?:map stage )?job \d+ \(Spark Connect")
WINDOWS = """SELECT w.run_id, w.topic, w.seq_from, w.seq_to
               FROM reconcile_windows w JOIN reconcile_runs r USING (run_id)
              WHERE r.warehouse = %s AND w.consumer = %s ORDER BY r.recorded_at, w.topic"""
SUMMARY = """SELECT topic, status, count, remaining FROM reconcile_summary
              WHERE run_id = %s AND consumer = %s ORDER BY 1, 2"""
CORRUPTED = corrupt_data("")[:-2]  # the prefix every corrupted payload starts with


@dataclasses.dataclass
class Live:
    home: AirflowHome
    meta: Metadata
    procs: dict
    topics: list[str]
    writers: Writers
    smtp: SmtpReceiver
    hook: WebhookReceiver
    connect: spark_connect_server.ServerState
    connect_settings: Settings
    port: int
    catalog: str = ""

    def windows(self, pg_url: str) -> dict[str, dict[str, tuple[int, int]]]:
        """pipeline run id → topic → (seq_from, seq_to], in commit order."""
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for run_id, topic, lo, hi in pg_rows(pg_url, WINDOWS, self.catalog, CONSUMER):
            out.setdefault(run_id, {})[topic] = (lo, hi)
        return out

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        """The Airflow REST API, logged in as the simple auth manager's admin."""
        base = self.home.env["AIRFLOW__API__BASE_URL"]
        passwords = Path(self.home.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
        login = {"username": "admin", "password": json.loads(passwords.read_text())["admin"]}
        token = http_json("POST", f"{base}/auth/token", login)["access_token"]
        req = urllib.request.Request(
            f"{base}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    def pause(self, paused: bool) -> None:
        assert (
            self.api("PATCH", f"/api/v2/dags/{DAG}", {"is_paused": paused})["is_paused"] is paused
        )

    def start_scheduler(self) -> None:
        self.procs["scheduler"] = start(self.home, "scheduler", "scheduler", "--skip-serve-logs")


def land_faulty_records(url: str, topics: list[str], landing: Path, pg_url: str, log: Path):
    """The first records, landed by a sink with fault injection (it drops ~3 % and corrupts
    two), which then stops; the arguments of the same consumer without faults."""
    args = ["--url", url, "--topics", ",".join(topics), "--consumer", CONSUMER]
    args += ["--landing", str(landing), "--database-url", pg_url, "--heartbeat-ms", "1000"]
    args += ["--flush-ms", "100", "--flush-rows", "150"]
    faulty = SinkProcess([*args, *FAULTS], log)
    faulty.start()
    for topic in topics:
        for n in range(0, FIRST_RECORDS, 50):
            http_json(
                "POST",
                f"{url}/v0/topics/{topic}/records",
                {"records": [{"data": {"n": n + i, "writer": "first"}} for i in range(50)]},
            )
    store = Landing(Storage.at(landing), CONSUMER)

    def landed() -> bool:
        faulty.alive()
        cursors = store.load_state().cursors
        return all(cursors.get(t, 0) >= FIRST_RECORDS for t in topics)

    wait_until(landed, 120, "the faulty sink to land the first records")
    assert faulty.proc is not None
    faulty.proc.send_signal(signal.SIGTERM)
    assert faulty.proc.wait(60) == 0
    assert {kind for kind, _, _ in store.load_faults()} == {DROP, CORRUPT}
    return args


def failed_fast(live: Live, run_id: str) -> None:
    """Fails the test at once, naming its tasks, when ``run_id`` failed."""
    run = live.meta.run(run_id)
    if run.state == "failed":
        raise AssertionError(f"{run} failed: {live.meta.tasks(run_id)}")


def kill_spark_connect_during(live: Live, run_id: str, task_id: str) -> None:
    """Once ``task_id`` of ``run_id`` runs and has started a Spark job on the server (its log
    says so), SIGKILL the server and start it again on the same port. The job is the step's
    first: the server log's offset is taken as the task turns ``running``, before its process
    has even connected."""

    def running() -> bool:
        failed_fast(live, run_id)
        return live.meta.tasks(run_id).get(task_id, (None, 0))[0] == "running"

    wait_until(running, RUNS_TIMEOUT_S, f"{task_id} of {run_id} to start")
    log = spark_connect_server.home(live.connect_settings) / "server.log"
    offset = log.stat().st_size

    def spark_job_started() -> bool:
        with open(log, "rb") as f:
            f.seek(offset)
            return SPARK_JOB.search(f.read()) is not None

    wait_until(spark_job_started, RUNS_TIMEOUT_S, f"a Spark job of {task_id}")
    pid = live.connect.pid
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    wait_until(lambda: not spark_connect_server.read_state(live.connect_settings), 60, "the kill")
    live.connect = spark_connect_server.start(
        live.connect_settings,
        port=live.connect.port,
        master="local[2]",
        driver_memory="1g",
        timeout_s=300,
    )


@dataclasses.dataclass(frozen=True)
class Expected:
    """What the landing says a window's reconcile must find, seq by seq."""

    statuses: dict[str, tuple[int, int | None]]  # status → (count, remaining) in the summary
    defects: dict[str, list[int]]  # defect status → its seqs


def expected_from_landing(
    rows: list[dict], faults: set[tuple[str, str, int]], topic: str, window: tuple[int, int]
) -> Expected:
    """Every seq of ``topic`` in the window ``(lo, hi]`` was written (no retention here):
    no copy landed → ``silent_gap``; only corrupted copies → ``mismatch``; a true and a
    corrupted copy → ``divergent``; else ``delivered`` (extra true copies → ``duplicate``).
    Each defect is a fault on record: a faulted seq counts only if the landing holds no true
    copy of it (a dropped last seq is delivered again by the sink that takes over)."""
    lo, hi = window
    copies: dict[int, list[bool]] = {}
    for r in rows:
        if r["kind"] == "record" and r["topic"] == topic and lo < r["seq"] <= hi:
            copies.setdefault(r["seq"], []).append(r["data"].startswith(CORRUPTED))
    delivered, duplicates = 0, 0
    defects: dict[str, list[int]] = {}
    for seq in range(lo + 1, hi + 1):
        corrupt = copies.get(seq, [])
        if not corrupt:
            defects.setdefault("silent_gap", []).append(seq)
        elif all(corrupt):
            defects.setdefault("mismatch", []).append(seq)
        elif any(corrupt):
            defects.setdefault("divergent", []).append(seq)
        else:
            delivered += 1
            duplicates += len(corrupt) - 1
    kinds = {"silent_gap": {DROP}, "mismatch": {CORRUPT}, "divergent": {CORRUPT}}
    for status, seqs in defects.items():
        for seq in seqs:
            assert any((k, topic, seq) in faults for k in kinds[status]), (status, topic, seq)
    statuses: dict[str, tuple[int, int | None]] = {"delivered": (delivered, None)}
    statuses |= {"duplicate": (duplicates, None)} if duplicates else {}
    statuses |= {status: (len(seqs), 0) for status, seqs in defects.items()}
    return Expected(statuses, defects)


def run_row(pg_url: str, pipeline_run_id: str) -> tuple:
    [row] = pg_rows(
        pg_url,
        "SELECT status, defects_found, defects_remaining FROM pipeline_runs WHERE run_id = %s",
        pipeline_run_id,
    )
    return tuple(row)


def summary(pg_url: str, pipeline_run_id: str) -> dict[str, dict[str, tuple[int, int | None]]]:
    """topic → status → (count, remaining) of one run."""
    out: dict[str, dict[str, tuple[int, int | None]]] = {}
    for topic, status, count, left in pg_rows(pg_url, SUMMARY, pipeline_run_id, CONSUMER):
        out.setdefault(topic, {})[status] = (count, left)
    return out


IN_FLIGHT = ("queued", "running", "restarting")  # task instances the scheduler's executor runs


def held_before_compact(live: Live, ready: tuple[str | None, ...]) -> bool:
    """Whether every run in progress is still before its ``compact`` (state in ``ready``): it
    has judged nothing yet, so wherever it stops it judges what the landing holds later."""
    runs = live.meta.runs()
    failed = [r for r in runs if r.state == "failed"]
    assert not failed, (failed, [live.meta.tasks(r.run_id) for r in failed])
    return all(
        live.meta.tasks(r.run_id).get("compact", (None, 0))[0] in ready
        for r in runs
        if r.state in ("queued", "running")
    )


def stop_scheduler_between_runs(live: Live) -> list[DagRun]:
    """Stop the scheduler between two runs' judgements, as an operator would; the runs then.

    Runs may be longer than the schedule, so the next run is created the moment one passes
    and there may be no idle moment to catch. Instead, once no run in progress has reached
    ``compact``, the DAG is paused (a paused DAG's runs stop where they are), the tasks in
    flight end, the scheduler stops (SIGTERM, by PID), and the DAG is unpaused while the
    scheduler is down. A run held that way judges, after the restart, what the landing holds
    by then. Should its ``compact`` have been queued before the pause took effect, the
    scheduler is started again and the next chance taken."""
    for _ in range(3):
        wait_until(
            lambda: held_before_compact(live, (None,)), RUNS_TIMEOUT_S, "a moment between runs"
        )
        live.pause(True)
        wait_until(lambda: not live.meta.tasks_in(*IN_FLIGHT), RUNS_TIMEOUT_S, "no task in flight")
        stop(live.procs["scheduler"])
        live.pause(False)
        if held_before_compact(live, (None, "scheduled")):
            return live.meta.runs()
        live.start_scheduler()
    raise AssertionError("each time, a run had queued its compact before the pause took effect")


def later_runs(pg_url: str, catalog: str, pipeline_run_id: str) -> list[str]:
    with psycopg.connect(pg_url) as conn:
        return run_tables.later_runs(conn, catalog, pipeline_run_id)
