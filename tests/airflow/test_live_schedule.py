"""The real ``audit_sync`` DAG under a live Airflow, as operators run it: scheduler, triggerer,
DAG processor and API server as their own processes, the API on a free port set by the one
setting ``AUDITSYNC_AIRFLOW_PORT``, a one-minute schedule (``AUDITSYNC_SCHEDULE``), the Spark
steps on a Spark Connect server this module starts, writers appending through the real watch
service and the real sink landing what it streams. One Airflow serves every assertion:

1. three scheduled runs pass while the writers write; the first judges a landing that a sink
   with fault injection wrote, finds its drops and corruptions, repairs them and alerts by
   e-mail (a real SMTP server on loopback) and webhook; during its reconcile the Spark
   Connect server is killed (SIGKILL) and restarted, and reconcile passes on its second try;
2. the scheduler is stopped while two interval ends pass and the writers go on, then
   restarted (``catchup=False``): the next run's windows start right after the last verified
   seq and reach the head, and it delivers exactly what was written meanwhile;
3. ``airflow backfill create`` of a past interval re-runs that interval's Airflow run, whose
   ``start_run`` refuses it (later runs built on its windows): no window moves, no verdict is
   counted twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from watch_service.settings import Settings
from watch_service.sink.landing import Landing
from watch_service.storage import Storage
from watch_service.store import runs as run_tables
from watch_service.tools import spark_connect as spark_connect_server
from watch_service.tools.airflow_env import airflow_env

from ..sink.harness import SinkProcess
from ..support import free_port, unique
from .conftest import BIN, AirflowHome, http_json, pg_rows, wait_until
from .live import DagRun, Metadata, Writers, ok, start, stop, task_log, wait_for_runs
from .receivers import SmtpReceiver, WebhookReceiver

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.airflow,
    pytest.mark.timeout(3600),
]
DAG = "audit_sync"
CONSUMER = "primary"
FAULTS = ["--fault-drop-fraction", "0.03", "--fault-corrupt", "2", "--fault-seed", "5"]
FIRST_RECORDS = 150  # per topic, landed by the faulty sink before Airflow starts
TASKS = (
    "wait_for_sinks",
    "start_run",
    "compact",
    "reconcile",
    "backfill_audit_log",
    "backfill_search_index",
    "verify",
    "quality",
    "publish",
)
# Deadlines, not sleeps: a run takes 40-60 s on a quiet machine, several minutes when the
# machine's two cores are shared with the rest of the suite.
RUNS_TIMEOUT_S = 600
SPARK_JOB = re.compile(rb"INFO DAGScheduler: Got (?:map stage )?job \d+ \(Spark Connect")
WINDOWS = """SELECT w.run_id, w.topic, w.seq_from, w.seq_to
               FROM reconcile_windows w JOIN reconcile_runs r USING (run_id)
              WHERE r.warehouse = %s AND w.consumer = %s ORDER BY r.recorded_at, w.topic"""
EMAIL_ROW = re.compile(
    r"<td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>\s*<td class=\"n\">(\d+)</td>\s*"
    r"<td class=\"(?:n|bad)\">(\d+)</td>\s*<td>([^<]*)</td>"
)
SUMMARY = """SELECT topic, status, count, remaining FROM reconcile_summary
              WHERE run_id = %s AND consumer = %s ORDER BY 1, 2"""


@dataclasses.dataclass
class Live:
    home: AirflowHome
    meta: Metadata
    procs: dict
    topics: list[str]
    writers: Writers
    faults: dict[tuple[str, str], int]
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


def _land_faulty_records(url: str, topics: list[str], landing: Path, pg_url: str, log: Path):
    """The first records, landed by a sink with fault injection (it drops ~3 % and corrupts
    two), which then stops; the faults it decided, per (kind, topic)."""
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

    wait_until(landed, 60, "the faulty sink to land the first records")
    assert faulty.proc is not None
    faulty.proc.send_signal(signal.SIGTERM)
    assert faulty.proc.wait(30) == 0
    faults: dict[tuple[str, str], int] = {}
    for kind, topic, _ in store.load_faults():
        faults[(kind, topic)] = faults.get((kind, topic), 0) + 1
    assert {k for k, _ in faults} == {"drop", "corrupt"}, faults
    return args, faults


@pytest.fixture(scope="module")
def live(pg_url, watch_service, tmp_path_factory):
    local = tmp_path_factory.mktemp("live-airflow")
    connect_settings = Settings(local_dir=local / "spark")
    connect = spark_connect_server.start(
        connect_settings, port=free_port(), master="local[2]", driver_memory="1g", timeout_s=None
    )
    port = free_port()
    topics = [unique("ledger"), unique("grants")]
    for topic in topics:
        http_json("PUT", f"{watch_service.url}/v0/topics/{topic}", {})
    procs: dict = {}
    with SmtpReceiver() as smtp, WebhookReceiver() as hook:
        env = airflow_env(
            Settings(local_dir=local, database_url=pg_url),
            {
                "AUDITSYNC_WATCH_URL": watch_service.url,
                "AUDITSYNC_AIRFLOW_PORT": str(port),
                "AUDITSYNC_SCHEDULE": "* * * * *",
                "AUDITSYNC_SPARK_MASTER": "local[2]",
                "AUDITSYNC_SPARK_CONNECT": connect.url,
                "AUDITSYNC_SENSOR_TIMEOUT_S": "120",
                "AUDITSYNC_ALERT_EMAIL": "oncall@example.com",
                "AUDITSYNC_ALERT_SMTP": smtp.url,
                "AUDITSYNC_ALERT_WEBHOOK": hook.url("live"),
            },
        )
        home = AirflowHome(
            local, {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        )
        sink_args, faults = _land_faulty_records(
            watch_service.url, topics, home.landing, pg_url, local / "sink.log"
        )
        writers = Writers(watch_service.url, topics)
        try:
            sink = SinkProcess(sink_args, local / "sink.log")  # the same consumer, no faults
            sink.start()
            procs["sink"] = sink.proc
            writers.start()
            home.run("db", "migrate", check=True, timeout=180)
            procs["api-server"] = start(home, "api-server", "api-server", "-w", "1")
            procs["scheduler"] = start(home, "scheduler", "scheduler", "--skip-serve-logs")
            procs["triggerer"] = start(home, "triggerer", "triggerer", "--skip-serve-logs")
            procs["dag-processor"] = start(home, "dag-processor", "dag-processor")
            meta = Metadata(home, DAG)
            base = env["AIRFLOW__API__BASE_URL"]
            wait_until(lambda: ok(f"{base}/api/v2/monitor/health"), 120, f"the API server {base}")
            wait_until(meta.exists, 120, "the DAG processor to parse audit_sync")
            connect = spark_connect_server.wait_ready(connect_settings, connect)
            live = Live(
                home,
                meta,
                procs,
                topics,
                writers,
                faults,
                smtp,
                hook,
                connect,
                connect_settings,
                port,
            )
            api(live, "PATCH", f"/api/v2/dags/{DAG}", {"is_paused": False})
            yield live
        finally:
            with contextlib.suppress(AssertionError):
                writers.stop()
            for name in ("scheduler", "triggerer", "dag-processor", "api-server", "sink"):
                if name in procs and procs[name].poll() is None:
                    stop(procs[name])
            state = spark_connect_server.read_state(connect_settings)
            if state is not None:
                spark_connect_server.terminate(state.pid)


def api(live: Live, method: str, path: str, body: dict | None = None) -> dict:
    """The Airflow REST API, logged in as the simple auth manager's admin."""
    import json
    import urllib.request

    base = live.home.env["AIRFLOW__API__BASE_URL"]
    passwords = json.loads(
        Path(live.home.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).read_text()
    )
    token = http_json(
        "POST", f"{base}/auth/token", {"username": "admin", "password": passwords["admin"]}
    )
    req = urllib.request.Request(
        f"{base}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token['access_token']}",
        },
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


# -- 1. scheduled runs, faults found and alerted, a Spark Connect restart retried -------------
@dataclasses.dataclass
class Scheduled:
    runs: list[DagRun]
    tasks: dict[str, dict[str, tuple[str | None, int]]]  # Airflow run id → task → (state, try)
    windows: dict[str, dict[str, tuple[int, int]]]
    killed_at_step: str
    reconcile_logs: list[list[dict]]  # the killed reconcile's tries


def kill_spark_connect_during(live: Live, run_id: str, task_id: str) -> None:
    """Once ``task_id`` of ``run_id`` runs and has started a Spark job on the server (its log
    says so), SIGKILL the server and start it again on the same port."""
    wait_until(
        lambda: live.meta.tasks(run_id).get(task_id, (None, 0))[0] == "running",
        240,
        f"{task_id} of {run_id} to start",
    )
    log = spark_connect_server.home(live.connect_settings) / "server.log"
    offset = log.stat().st_size

    def spark_job_started() -> bool:
        with open(log, "rb") as f:
            f.seek(offset)
            return SPARK_JOB.search(f.read()) is not None

    wait_until(spark_job_started, 300, f"a Spark job of {task_id}")
    pid = live.connect.pid
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    wait_until(lambda: not spark_connect_server.read_state(live.connect_settings), 30, "the kill")
    live.connect = spark_connect_server.start(
        live.connect_settings, port=live.connect.port, master="local[2]", driver_memory="1g"
    )


@pytest.fixture(scope="module")
def scheduled(live, pg_url) -> Scheduled:
    [first] = wait_until(live.meta.runs, 180, "the first scheduled run")
    kill_spark_connect_during(live, first.run_id, "reconcile")
    passed = wait_for_runs(live.meta, 3, RUNS_TIMEOUT_S * 3, "three scheduled runs to pass")[:3]
    live.catalog = pg_rows(
        pg_url,
        "SELECT warehouse FROM reconcile_runs WHERE run_id = %s",
        passed[0].pipeline_run_id,
    )[0][0]
    return Scheduled(
        passed,
        {r.run_id: live.meta.tasks(r.run_id) for r in passed},
        live.windows(pg_url),
        "reconcile",
        [task_log(live.home, DAG, first.run_id, "reconcile", n) for n in (1, 2)],
    )


def run_row(pg_url: str, pipeline_run_id: str) -> tuple:
    [row] = pg_rows(
        pg_url,
        "SELECT status, defects_found, defects_remaining FROM pipeline_runs WHERE run_id = %s",
        pipeline_run_id,
    )
    return tuple(row)


def summary(pg_url: str, pipeline_run_id: str) -> dict[str, dict[str, tuple[int, int]]]:
    """topic → status → (count, remaining) of one run."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for topic, status, count, left in pg_rows(pg_url, SUMMARY, pipeline_run_id, CONSUMER):
        out.setdefault(topic, {})[status] = (count, left)
    return out


def test_three_scheduled_runs_pass_while_writers_write(live, scheduled, pg_url):
    runs = scheduled.runs
    assert [r.run_type for r in runs] == ["scheduled"] * 3
    for run in runs:
        assert run.end - run.start == timedelta(minutes=1)  # the one-minute schedule
        states = {t: s for t, (s, _) in scheduled.tasks[run.run_id].items()}
        assert states == dict.fromkeys(TASKS, "success"), (run.run_id, states)
    found = sum(live.faults.values())
    assert [run_row(pg_url, r.pipeline_run_id) for r in runs] == [
        ("passed", found, 0),
        ("passed", 0, 0),
        ("passed", 0, 0),
    ]
    # Each run judged what was written since the one before, up to where the sink had landed:
    # windows chain without a gap or an overlap, each holding new records.
    windows = scheduled.windows
    assert list(windows) == [r.pipeline_run_id for r in runs]
    for topic in live.topics:
        chain = [windows[r.pipeline_run_id][topic] for r in runs]
        assert chain[0][0] == 0 and chain[0][1] >= FIRST_RECORDS, chain
        assert all(a[1] == b[0] and b[1] > b[0] for a, b in itertools.pairwise(chain)), chain
        for run, (lo, hi) in zip(runs[1:], chain[1:]):
            assert summary(pg_url, run.pipeline_run_id)[topic] == {"delivered": (hi - lo, None)}
            assert live.writers.written(topic, lo, hi) == hi - lo


def test_the_faults_are_found_repaired_and_alerted_once_by_email_and_webhook(
    live, scheduled, pg_url
):
    first = scheduled.runs[0]
    drops = {t: live.faults.get(("drop", t), 0) for t in live.topics}
    bad = {t: live.faults.get(("corrupt", t), 0) for t in live.topics}
    found = sum(drops.values()) + sum(bad.values())
    expected_rows = set()
    for topic in live.topics:
        lo, hi = scheduled.windows[first.pipeline_run_id][topic]
        statuses = {"delivered": (hi - lo - drops[topic] - bad[topic], None)}
        statuses |= {"silent_gap": (drops[topic], 0)} if drops[topic] else {}
        statuses |= {"mismatch": (bad[topic], 0)} if bad[topic] else {}
        assert summary(pg_url, first.pipeline_run_id)[topic] == statuses
        for status, (n, _) in statuses.items():
            if status != "delivered":
                expected_rows.add((CONSUMER, topic, status, n, 0, f"1–{hi}"))
    title = (
        f"[auditsync] audit_sync: run {first.pipeline_run_id} found {found} defects (all repaired)"
    )
    [mail] = live.smtp.wait_for(lambda m: m["Subject"] == title, 60, "the defects e-mail")
    assert mail["X-Envelope-To"] == "oncall@example.com"
    page = mail.get_body(("html",)).get_content()
    rows = {(c, t, s, int(n), int(left), w) for c, t, s, n, left, w in EMAIL_ROW.findall(page)}
    assert rows == expected_rows, page
    base = f"http://127.0.0.1:{live.port}"
    assert f'href="{base}/auditsync/?topic={live.topics[0]}&amp;consumer={CONSUMER}"' in page
    [(path, body)] = live.hook.wait_for(
        lambda i: i[1]["text"].startswith(title), 60, "the defects webhook"
    )
    assert path == "/hook/live"
    lines = body["text"].splitlines()
    for c, t, status, n, left, window in sorted(expected_rows):
        assert f"- {c}/{t} {status}: found {n}, left {left}, window {window}" in lines, lines
    assert f"Airflow run: {first.run_id}" in lines
    assert f"Reconciliation page: {base}/auditsync/" in lines
    ledger = pg_rows(
        pg_url,
        "SELECT run_id, channel FROM alerts_sent WHERE dag_id = %s AND kind = 'defects_found' "
        "AND run_id = ANY(%s) ORDER BY 2",
        DAG,
        [r.run_id for r in scheduled.runs],
    )
    assert ledger == [(first.run_id, "email"), (first.run_id, "webhook")]  # once, despite the retry


def test_a_spark_connect_restart_during_reconcile_is_retried_once(live, scheduled):
    first = scheduled.runs[0]
    tries = {t: n for t, (_, n) in scheduled.tasks[first.run_id].items()}
    assert tries == {**dict.fromkeys(TASKS, 1), "reconcile": 2}
    assert live.meta.history(first.run_id, "reconcile") == [(1, "failed")]
    decisions = [
        e for e in scheduled.reconcile_logs[0] if e.get("event") == "Retry policy decision"
    ]
    assert [(e["action"], e["reason"].split(":")[0]) for e in decisions] == [
        ("retry", "transient fault, retrying")
    ]
    assert re.fullmatch(
        r"transient fault, retrying: Spark Connect INVALID_HANDLE\.(SESSION_CHANGED|"
        r"SESSION_NOT_FOUND|OPERATION_NOT_FOUND) \(the server restarted\)",
        decisions[0]["reason"],
    ), decisions
    assert not any(e.get("event") == "Retry policy decision" for e in scheduled.reconcile_logs[1])


# -- 2. the scheduler down across intervals while the writers go on ---------------------------
@dataclasses.dataclass
class Outage:
    stopped: float  # time.time() when the scheduler had exited
    restarted: float
    writes: dict[str, int]  # records written per topic while the scheduler was down
    runs_at_stop: list[DagRun]
    runs_at_restart: list[DagRun]
    last_verified: dict[str, int]  # topic → the highest seq judged by a passed run before
    heads: dict[str, int]  # topic → head when the scheduler came back (the writers stopped)
    next_run: DagRun  # the first run to reconcile after the restart
    windows: dict[str, tuple[int, int]]  # its windows


def now_utc() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@pytest.fixture(scope="module")
def outage(live, scheduled, pg_url) -> Outage:
    wait_until(
        lambda: all(r.state not in ("queued", "running") for r in live.meta.runs()),
        RUNS_TIMEOUT_S,
        "no audit_sync run in progress",
    )
    stop(live.procs["scheduler"])
    stopped, stopped_mono = time.time(), time.monotonic()
    runs_at_stop = live.meta.runs()
    # Down while two interval ends pass, so at least one interval's run is never created.
    back_at = (int(stopped // 60) + 2) * 60 + 3
    wait_until(lambda: time.time() >= back_at, 200, "two interval ends to pass")
    heads = live.writers.stop()
    writes = {t: live.writers.written_between(t, stopped_mono, time.monotonic()) for t in heads}
    windows_before = live.windows(pg_url)
    last_verified = {t: max(w[t][1] for w in windows_before.values()) for t in live.topics}
    runs_at_restart = live.meta.runs()
    restarted = time.time()
    live.procs["scheduler"] = start(live.home, "scheduler", "scheduler", "--skip-serve-logs")

    def next_reconciled() -> str | None:
        rows = pg_rows(
            pg_url,
            "SELECT run_id FROM reconcile_runs WHERE warehouse = %s "
            "AND recorded_at > to_timestamp(%s) ORDER BY recorded_at LIMIT 1",
            live.catalog,
            restarted,
        )
        return rows[0][0] if rows else None

    pipeline_run_id = wait_until(next_reconciled, RUNS_TIMEOUT_S, "a run to reconcile")
    [next_run] = [r for r in live.meta.runs() if r.pipeline_run_id == pipeline_run_id]
    wait_until(
        lambda: live.meta.run(next_run.run_id).state == "success",
        RUNS_TIMEOUT_S,
        f"{next_run.run_id} to pass",
    )
    return Outage(
        stopped,
        restarted,
        writes,
        runs_at_stop,
        runs_at_restart,
        last_verified,
        heads,
        live.meta.run(next_run.run_id),
        live.windows(pg_url)[pipeline_run_id],
    )


def test_after_an_outage_the_next_run_covers_every_missed_seq(live, scheduled, outage, pg_url):
    # Nothing was scheduled while the scheduler was down, across two interval ends.
    assert outage.runs_at_restart == outage.runs_at_stop
    assert int(outage.restarted // 60) - int(outage.stopped // 60) >= 2
    assert all(n > 0 for n in outage.writes.values()), outage.writes
    # catchup=False: the interval that ended first during the outage never gets a run.
    assert outage.next_run.run_type == "scheduled" and outage.next_run.state == "success"
    first_end = datetime.fromtimestamp((int(outage.stopped // 60) + 1) * 60, UTC)
    assert first_end.replace(tzinfo=None) not in {r.end for r in live.meta.runs()}
    # Its windows start right after the last verified seq and reach the head it judged at
    # (the writers had stopped): every seq written during the outage, and since, judged once.
    assert outage.windows == {t: (outage.last_verified[t], outage.heads[t]) for t in live.topics}
    heads_now = {
        t["topic"]: t["head_seq"]
        for t in http_json("GET", f"{live.writers.url}/v0/topics")["topics"]
    }
    assert {t: heads_now[t] for t in live.topics} == outage.heads
    assert run_row(pg_url, outage.next_run.pipeline_run_id) == ("passed", 0, 0)
    delivered = summary(pg_url, outage.next_run.pipeline_run_id)
    for topic in live.topics:
        lo, hi = outage.windows[topic]
        written = live.writers.written(topic, lo, hi)
        assert written == hi - lo >= outage.writes[topic]
        assert delivered[topic] == {"delivered": (written, None)}, (topic, delivered)


# -- 3. an operator's backfill of a past interval ---------------------------------------------
@dataclasses.dataclass
class Backfill:
    target: DagRun  # the past interval's run, before the backfill
    output: str  # what `airflow backfill create` printed
    run: DagRun  # the same Airflow run after the backfill
    tasks: dict[str, tuple[str | None, int]]
    start_run_log: list[dict]
    start_run_ended: datetime
    before: dict  # run tables before / after
    after: dict


def cumulative(pg_url: str, catalog: str) -> dict[tuple[str, str, str], int]:
    """Net verdicts per (consumer, topic, status) over every run of the warehouse."""
    import psycopg

    with psycopg.connect(pg_url) as conn:
        return run_tables.cumulative_summary(conn, catalog)


def run_tables_facts(live: Live, pg_url: str, pipeline_run_id: str) -> dict:
    return {
        "windows": live.windows(pg_url),
        "pipeline_run": pg_rows(
            pg_url,
            "SELECT status, defects_found, defects_remaining, started_at, finished_at, steps "
            "FROM pipeline_runs WHERE run_id = %s",
            pipeline_run_id,
        ),
        "reconcile_run": pg_rows(
            pg_url,
            "SELECT batch_from, batch_to, recorded_at FROM reconcile_runs WHERE run_id = %s",
            pipeline_run_id,
        ),
        "verdicts": cumulative(pg_url, live.catalog),
    }


@pytest.fixture(scope="module")
def backfill(live, scheduled, outage, pg_url) -> Backfill:
    target = scheduled.runs[1]  # later runs built on its windows
    before = run_tables_facts(live, pg_url, target.pipeline_run_id)
    day = target.start.isoformat() + "+00:00"
    out = live.home.run(
        "backfill",
        "create",
        "--dag-id",
        DAG,
        "--from-date",
        day,
        "--to-date",
        day,
        "--reprocess-behavior",
        "completed",
        check=True,
        timeout=300,
    )

    def finished() -> DagRun | None:
        run = live.meta.run(target.run_id)
        if run.backfill_id is None or run.state not in ("success", "failed"):
            return None
        return run if live.meta.backfill_done(run.backfill_id) else None

    run = wait_until(finished, RUNS_TIMEOUT_S, f"the backfill of {target.run_id}")
    tasks = live.meta.tasks(target.run_id)
    return Backfill(
        target,
        out.stdout + out.stderr,
        run,
        tasks,
        task_log(live.home, DAG, target.run_id, "start_run", tasks["start_run"][1]),
        live.meta.task_ended(target.run_id, "start_run"),
        before,
        run_tables_facts(live, pg_url, target.pipeline_run_id),
    )


def test_a_backfill_of_a_past_interval_is_refused_and_moves_no_window(
    live, scheduled, outage, backfill, pg_url
):
    target, run = backfill.target, backfill.run
    # The CLI re-ran the interval's own Airflow run (same run id, same data interval) ...
    assert (run.run_id, run.start, run.end) == (target.run_id, target.start, target.end)
    assert run.run_type == "backfill" and run.state == "failed"
    # ... whose start_run refused it, naming the runs that built on it; nothing ran after.
    assert backfill.tasks["wait_for_sinks"] == ("success", 2)
    assert backfill.tasks["start_run"] == ("failed", 2)
    later = [
        r
        for r, at in pg_rows(
            pg_url,
            "SELECT run_id, recorded_at FROM reconcile_runs WHERE warehouse = %s "
            "AND recorded_at > (SELECT recorded_at FROM reconcile_runs WHERE run_id = %s) "
            "ORDER BY recorded_at",
            live.catalog,
            target.pipeline_run_id,
        )
        if at.replace(tzinfo=None) < backfill.start_run_ended
    ]
    assert later[:2] == [scheduled.runs[2].pipeline_run_id, outage.next_run.pipeline_run_id]
    message = run_tables.rerun_refusal(target.pipeline_run_id, later)
    assert any(message in json.dumps(e) for e in backfill.start_run_log), backfill.start_run_log
    for task in TASKS[2:]:
        assert backfill.tasks[task][0] == "upstream_failed", backfill.tasks
    # Its windows, its record and every verdict count are as they were: nothing judged twice,
    # no window moved back.
    assert backfill.after["pipeline_run"] == backfill.before["pipeline_run"]
    assert backfill.after["reconcile_run"] == backfill.before["reconcile_run"]
    assert backfill.after["verdicts"] == backfill.before["verdicts"]
    windows_after = backfill.after["windows"]
    assert {k: windows_after[k] for k in backfill.before["windows"]} == backfill.before["windows"]
