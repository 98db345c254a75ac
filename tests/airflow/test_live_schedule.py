"""The real ``audit_sync`` DAG under a live Airflow, as operators run it: scheduler, triggerer,
DAG processor and API server as their own processes, the API on a free port set by the one
setting ``AUDITSYNC_AIRFLOW_PORT``, Airflow's metadata in a PostgreSQL database of its own, a
one-minute schedule (``AUDITSYNC_SCHEDULE``), the Spark steps on a Spark Connect server this
module starts, writers appending through the real watch service and the real sink landing what
it streams. One Airflow serves every assertion, in this order:

1. two scheduled runs pass while the writers write; the first judges a landing that a sink
   with fault injection wrote, finds exactly the faulted seqs the landing holds no true copy
   of, repairs them and alerts by e-mail (a real SMTP server on loopback) and webhook with
   their counts and ranges; during its reconcile the Spark Connect server is killed (SIGKILL)
   and restarted, and reconcile passes on its second try (``AUDITSYNC_RETRY_DELAY_S`` makes
   that retry wait 2 s, not the default 30 s with backoff);
2. the scheduler is stopped while two interval ends pass and the writers go on, then
   restarted: the next run's windows start right after the last verified seq and reach the
   head, and it delivers exactly what was written meanwhile;
3. ``airflow backfill create`` of a past interval re-runs that interval's Airflow run, whose
   ``start_run`` refuses it (later runs built on its windows): no window moves, no verdict is
   counted twice;
4. a landing segment that is no Parquet file fails a scheduled run's compact for good:
   ``pipeline_runs`` and the Reconciliation page say ``failed``, in ``compact``, and why; the
   segment moved away, the operator clears the run's compact (and what follows): the run turns
   ``running`` again, then ``passed``. The segment goes in once the run after the outage has
   compacted, so the scheduled run that goes on beside the backfill of 3 is the one that fails,
   and it is moved away as soon as one failed on it: this section waits for no run of its own
   before the clear.

No assertion depends on timing: every step waits for the event it needs (a run's state, a
task's log line, a row), with deadlines sized for a loaded two-core machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import itertools
import json
import os
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from auditsync_plugin.notifications import alerts_render
from watch_service.settings import Settings
from watch_service.sink.landing import Landing
from watch_service.storage import Storage
from watch_service.store import runs as run_tables
from watch_service.tools import spark_connect as spark_connect_server
from watch_service.tools.airflow_env import airflow_env

from ..sink.harness import SinkProcess
from ..sink.harness import rows as landed_rows
from ..support import free_port, stop_all, unique
from .conftest import AUDIT_SYNC_TASKS as TASKS
from .conftest import BIN, AirflowHome, http_json, pg_rows, wait_until
from .live import (
    DagRun,
    Metadata,
    Writers,
    airflow_database,
    ok,
    start,
    task_log,
    wait_for_runs,
)
from .live_audit import (
    CONSUMER,
    DAG,
    FIRST_RECORDS,
    RUNS_TIMEOUT_S,
    Expected,
    Live,
    expected_from_landing,
    failed_fast,
    kill_spark_connect_during,
    land_faulty_records,
    later_runs,
    run_row,
    stop_scheduler_between_runs,
    summary,
)
from .receivers import SmtpReceiver, WebhookReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.airflow, pytest.mark.timeout(3600)]
# One row of the e-mail's findings table: consumer, topic, status, found, left, seqs, still.
EMAIL_ROW = re.compile(
    r"<td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>\s*<td class=\"n\">(\d+)</td>\s*"
    r"<td class=\"(?:n|bad)\">(\d+)</td>\s*<td>([^<]*)</td><td>([^<]*)</td>"
)
TRANSIENT_REASON = re.compile(
    r"transient fault, retrying: (Spark Connect INVALID_HANDLE\.(SESSION_CHANGED|"
    r"SESSION_NOT_FOUND|OPERATION_NOT_FOUND) \(the server restarted\)|gRPC UNAVAILABLE)"
)


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
                "AUDITSYNC_SENSOR_TIMEOUT_S": "600",
                "AUDITSYNC_VERIFY_DEADLINE_S": "3600",
                "AUDITSYNC_RETRY_DELAY_S": "2",
                "AUDITSYNC_ALERT_EMAIL": "oncall@example.com",
                "AUDITSYNC_ALERT_SMTP": smtp.url,
                "AUDITSYNC_ALERT_WEBHOOK": hook.url("live"),
            },
        )
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = airflow_database(pg_url)
        # The DAG files do not change while the module runs: the DAG processor parses them as it
        # starts (and for a callback), not again every 30 s (airflow_env's interval for a
        # deployment, where they do change), which cost a share of the two cores the runs need.
        env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] = "3600"
        home = AirflowHome(
            local, {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        )
        Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
        procs["migrate"] = start(home, "migrate", "db", "migrate")  # while the sink lands
        sink_args = land_faulty_records(
            watch_service.url, topics, home.landing, pg_url, local / "sink.log"
        )
        writers = Writers(watch_service.url, topics)
        meta = Metadata(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], DAG)
        try:
            sink = SinkProcess(sink_args, local / "sink.log")  # the same consumer, no faults
            sink.start()
            procs["sink"] = sink.proc
            writers.start()
            assert procs["migrate"].wait(600) == 0, (local / "migrate.log").read_text()[-3000:]
            procs["api-server"] = start(home, "api-server", "api-server", "-w", "1")
            procs["scheduler"] = start(home, "scheduler", "scheduler", "--skip-serve-logs")
            procs["triggerer"] = start(home, "triggerer", "triggerer", "--skip-serve-logs")
            procs["dag-processor"] = start(home, "dag-processor", "dag-processor")
            base = env["AIRFLOW__API__BASE_URL"]
            wait_until(lambda: ok(f"{base}/api/v2/monitor/health"), 300, f"the API server {base}")
            wait_until(meta.exists, 300, "the DAG processor to parse audit_sync")
            connect = spark_connect_server.wait_ready(connect_settings, connect, timeout_s=300)
            live = Live(
                home, meta, procs, topics, writers, smtp, hook, connect, connect_settings, port
            )
            live.pause(False)
            yield live
        finally:
            with contextlib.suppress(AssertionError):
                writers.stop()
            # Airflow 3.3's DAG processor once logged "Exiting gracefully upon receiving signal
            # 15" and went on parsing for 89 s, until the SIGKILL: it is signalled first and
            # gets 5 s more once the others stopped. The scheduler waits for its running task,
            # which reports to the API server: that one stops after it (at once, a stopping
            # task retried the execution API for 40 s).
            processor = procs.get("dag-processor")
            if processor is not None and processor.poll() is None:
                processor.send_signal(signal.SIGTERM)
            for names in (("scheduler", "triggerer"), ("api-server", "sink", "migrate")):
                stop_all([procs[name] for name in names if name in procs])
            if processor is not None:
                stop_all([processor], timeout=5)
            meta.close()
            state = spark_connect_server.read_state(connect_settings)
            if state is not None:
                spark_connect_server.terminate(state.pid)


# -- 1. scheduled runs, faults found and alerted, a Spark Connect restart retried -------------
SCHEDULED_RUNS = 2  # the first judges the faulty landing; the second's window chains on


@dataclasses.dataclass
class Scheduled:
    runs: list[DagRun]
    tasks: dict[str, dict[str, tuple[str | None, int]]]  # Airflow run id → task → (state, try)
    windows: dict[str, dict[str, tuple[int, int]]]  # the runs' windows
    reconcile_logs: list[list[dict]]  # the killed reconcile's tries
    landed: list[dict]  # the landing's rows once the runs passed


@pytest.fixture(scope="module")
def scheduled(live, pg_url) -> Scheduled:
    first = wait_until(live.meta.runs, RUNS_TIMEOUT_S, "the first scheduled run")[0]
    kill_spark_connect_during(live, first.run_id, "reconcile")
    passed = wait_for_runs(
        live.meta, SCHEDULED_RUNS, RUNS_TIMEOUT_S * SCHEDULED_RUNS, "the scheduled runs to pass"
    )[:SCHEDULED_RUNS]
    assert passed[0].run_id == first.run_id
    live.catalog = pg_rows(
        pg_url,
        "SELECT warehouse FROM reconcile_runs WHERE run_id = %s",
        passed[0].pipeline_run_id,
    )[0][0]
    ids = [r.pipeline_run_id for r in passed]
    windows = live.windows(pg_url)
    assert list(windows)[:SCHEDULED_RUNS] == ids  # a later run may have reconciled since
    return Scheduled(
        passed,
        {r.run_id: live.meta.tasks(r.run_id) for r in passed},
        {i: windows[i] for i in ids},
        [task_log(live.home, DAG, first.run_id, "reconcile", n) for n in (1, 2)],
        landed_rows(Storage.at(live.home.landing / CONSUMER)),
    )


def first_run_expected(live: Live, scheduled: Scheduled) -> dict[str, Expected]:
    faults = Landing(Storage.at(live.home.landing), CONSUMER).load_faults()
    first = scheduled.windows[scheduled.runs[0].pipeline_run_id]
    return {t: expected_from_landing(scheduled.landed, faults, t, first[t]) for t in live.topics}


def test_scheduled_runs_pass_while_writers_write(live, scheduled, pg_url):
    runs = scheduled.runs
    assert [r.run_type for r in runs] == ["scheduled"] * SCHEDULED_RUNS
    for run in runs:
        assert (run.end - run.start).total_seconds() == 60  # the one-minute schedule
        states = {t: s for t, (s, _) in scheduled.tasks[run.run_id].items()}
        assert states == dict.fromkeys(TASKS, "success"), (run.run_id, states)
    expected = first_run_expected(live, scheduled)
    found = sum(len(s) for e in expected.values() for s in e.defects.values())
    assert found > 0, expected  # the faulty sink left defects to find
    assert [run_row(pg_url, r.pipeline_run_id) for r in runs] == [
        ("passed", found, 0),
        *[("passed", 0, 0)] * (SCHEDULED_RUNS - 1),
    ]
    # Each run judged what was written since the one before, up to where the sink had landed:
    # windows chain without a gap or an overlap, each holding new records.
    windows = scheduled.windows
    first = summary(pg_url, runs[0].pipeline_run_id)
    for topic in live.topics:
        chain = [windows[r.pipeline_run_id][topic] for r in runs]
        assert chain[0][0] == 0 and chain[0][1] >= FIRST_RECORDS, chain
        assert all(a[1] == b[0] and b[1] > b[0] for a, b in itertools.pairwise(chain)), chain
        assert first[topic] == expected[topic].statuses, (topic, expected[topic])
        for run, (lo, hi) in zip(runs[1:], chain[1:]):
            assert summary(pg_url, run.pipeline_run_id)[topic] == {"delivered": (hi - lo, None)}
            assert live.writers.written(topic, lo, hi) == hi - lo


def test_the_faults_are_found_repaired_and_alerted_once_by_email_and_webhook(
    live, scheduled, pg_url
):
    first = scheduled.runs[0]
    expected = first_run_expected(live, scheduled)
    found = sum(len(s) for e in expected.values() for s in e.defects.values())
    title = (
        f"[auditsync] audit_sync: run {first.pipeline_run_id} found {found} defects (all repaired)"
    )
    [mail] = live.smtp.wait_for(lambda m: m["Subject"] == title, 120, "the defects e-mail")
    assert mail["X-Envelope-To"] == "oncall@example.com"
    page = mail.get_body(("html",)).get_content()
    base = f"http://127.0.0.1:{live.port}"
    findings = f"{base}/auditsync/findings?run={first.pipeline_run_id}"
    rows = set()
    for topic in live.topics:
        for status, seqs in expected[topic].defects.items():
            rows.add((CONSUMER, topic, status, len(seqs), 0, alerts_render.format_ranges(seqs)))
            link = f"{findings}&amp;consumer={CONSUMER}&amp;topic={topic}&amp;status={status}"
            assert f'<a href="{link}">findings</a>' in page
    shown = {
        (c, t, s, int(n), int(left), seqs) for c, t, s, n, left, seqs, _ in EMAIL_ROW.findall(page)
    }
    assert shown == rows, page
    assert f"<tr><th>defects found</th><td>{found}</td></tr>" in page
    [(path, body)] = live.hook.wait_for(
        lambda i: i[1]["text"].startswith(title), 120, "the defects webhook"
    )
    assert path == "/hook/live"
    lines = body["text"].splitlines()
    findings_lines = [x for x in lines if x.startswith(f"- {CONSUMER}/")]
    assert sorted(findings_lines) == sorted(
        f"- {c}/{t} {s}: found {n}, left {left}, seqs {seqs}" for c, t, s, n, left, seqs in rows
    )
    assert f"Airflow run: {first.run_id}" in lines
    assert f"Reconciliation page: {base}/auditsync/" in lines
    assert f"Findings: {findings}" in lines
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
    assert [e["action"] for e in decisions] == ["retry"], decisions
    assert TRANSIENT_REASON.fullmatch(decisions[0]["reason"]), decisions
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


@pytest.fixture(scope="module")
def outage(live, scheduled, broken_landing, pg_url) -> Outage:
    runs_at_stop = stop_scheduler_between_runs(live)
    stopped, stopped_mono = time.time(), time.monotonic()
    # Down while two interval ends pass, so at least one interval's run is never created.
    back_at = (int(stopped // 60) + 2) * 60 + 3
    wait_until(lambda: time.time() >= back_at, 300, "two interval ends to pass")
    heads = live.writers.stop()
    writes = {t: live.writers.written_between(t, stopped_mono, time.monotonic()) for t in heads}
    windows_before = live.windows(pg_url)
    last_verified = {t: max(w[t][1] for w in windows_before.values()) for t in live.topics}
    runs_at_restart = live.meta.runs()
    restarted = time.time()
    live.start_scheduler()

    def next_reconciled() -> str | None:
        rows = pg_rows(
            pg_url,
            "SELECT run_id FROM reconcile_runs WHERE warehouse = %s "
            "AND recorded_at > to_timestamp(%s) ORDER BY recorded_at LIMIT 1",
            live.catalog,
            restarted,
        )
        failed = [r for r in live.meta.runs() if r.state == "failed"]
        assert not failed, (failed, [live.meta.tasks(r.run_id) for r in failed])
        return rows[0][0] if rows else None

    pipeline_run_id = wait_until(next_reconciled, RUNS_TIMEOUT_S, "a run to reconcile")
    # Section 4's fault goes in behind this run's compact: the next run fails on it.
    broken_landing.write()
    [next_run] = [r for r in live.meta.runs() if r.pipeline_run_id == pipeline_run_id]

    def passed() -> bool:
        failed_fast(live, next_run.run_id)
        return live.meta.run(next_run.run_id).state == "success"

    wait_until(passed, RUNS_TIMEOUT_S, f"{next_run.run_id} to pass")
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
    assert outage.next_run.run_type == "scheduled" and outage.next_run.state == "success"
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
    before: dict  # run tables before / after
    after: dict


def run_tables_facts(live: Live, pg_url: str, pipeline_run_id: str) -> dict:
    windows = live.windows(pg_url)
    return {
        "windows": windows,
        "later": later_runs(pg_url, live.catalog, pipeline_run_id),
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
        "verdicts": {
            run_id: pg_rows(
                pg_url,
                "SELECT consumer, topic, status, count, remaining, revised FROM reconcile_summary"
                " WHERE run_id = %s ORDER BY 1, 2, 3",
                run_id,
            )
            for run_id in windows
        },
    }


@pytest.fixture(scope="module")
def backfill(live, scheduled, outage, broken_landing, pg_url) -> Backfill:
    target = scheduled.runs[-1]  # the run after the outage built on its windows
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
        timeout=600,
    )

    def finished() -> DagRun | None:
        broken_landing.failed_run()  # section 4's fault moved away once a run failed on it
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
        before,
        run_tables_facts(live, pg_url, target.pipeline_run_id),
    )


def test_a_backfill_of_a_past_interval_is_refused_and_moves_no_window(
    live, scheduled, outage, backfill, pg_url
):
    target, run = backfill.target, backfill.run
    # The CLI re-ran the interval's own Airflow run (same run id, same data interval) ...
    assert (run.run_id, run.start, run.end) == (target.run_id, target.start, target.end)
    assert run.run_type == "backfill" and run.state == "failed", backfill.output
    # ... whose start_run refused it, naming the runs that built on it; nothing ran after.
    assert backfill.tasks["wait_for_sinks"] == ("success", 2)
    assert backfill.tasks["start_run"] == ("failed", 2)
    for task in TASKS[2:]:
        assert backfill.tasks[task][0] == "upstream_failed", backfill.tasks
    known, later = backfill.before["later"], backfill.after["later"]
    assert known and outage.next_run.pipeline_run_id in known
    assert later[: len(known)] == known
    # The refusal names the later runs reconciled when it was decided: those known before
    # the backfill, and any scheduled run that reconciled meanwhile.
    text = "\n".join(json.dumps(e) for e in backfill.start_run_log)
    named = [
        k
        for k in range(len(known), len(later) + 1)
        if run_tables.rerun_refusal(target.pipeline_run_id, later[:k]) in text
    ]
    assert len(named) == 1, backfill.start_run_log
    # Its windows, its record and every earlier run's verdicts are as they were: nothing
    # judged twice, no window moved back.
    assert backfill.after["pipeline_run"] == backfill.before["pipeline_run"]
    assert backfill.after["reconcile_run"] == backfill.before["reconcile_run"]
    verdicts = backfill.after["verdicts"]
    assert {k: verdicts[k] for k in backfill.before["verdicts"]} == backfill.before["verdicts"]
    windows = backfill.after["windows"]
    assert {k: windows[k] for k in backfill.before["windows"]} == backfill.before["windows"]
    # Over every run of the warehouse, the windows still chain from 0 without a gap or an
    # overlap: each seq judged by exactly one run.
    for topic in live.topics:
        chain = [w[topic] for w in windows.values() if topic in w]
        assert chain[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(chain)), chain


# -- 4. a step that fails for good, then its run cleared ---------------------------------------
FAILED_RUN_SQL = "SELECT status, failed_step, failure_reason FROM pipeline_runs WHERE run_id = %s"


@dataclasses.dataclass
class BrokenLanding:
    """A landing segment that is no Parquet file (a real fault: compact cannot read it, and no
    retry would). Written once, it fails the next run to compact for good; it is moved away as
    soon as a run failed on it, so no later run does."""

    live: Live
    known: set[str] = dataclasses.field(default_factory=set)  # the runs before it was written
    segment: Path | None = None
    failed: DagRun | None = None

    def write(self) -> None:
        if self.segment is not None:
            return
        self.known = {r.run_id for r in self.live.meta.runs()}
        landing = self.live.home.landing
        after = Landing(Storage.at(landing), CONSUMER).segments()[-1].last_frame_no + 1_000_000
        self.segment = landing / CONSUMER / f"part-{after:012d}-{after:012d}.parquet"  # no name
        self.segment.write_bytes(b"not a parquet file\n")  # the sink will write

    def failed_run(self) -> DagRun | None:
        """The first run whose compact failed since the segment was written (then moved away)."""
        if self.failed is None and self.segment is not None:
            meta = self.live.meta
            self.failed = next(
                (
                    run
                    for run in meta.runs()
                    if run.run_id not in self.known
                    and meta.tasks(run.run_id).get("compact", ("",))[0] == "failed"
                ),
                None,
            )
            if self.failed is not None:
                self.remove()
        return self.failed

    def remove(self) -> None:
        if self.segment is not None:
            self.segment.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def broken_landing(live) -> Iterator[BrokenLanding]:
    broken = BrokenLanding(live)
    yield broken
    broken.remove()


@dataclasses.dataclass
class Cleared:
    run: DagRun  # the first run whose compact failed, as it failed
    failed_row: list[tuple]  # its pipeline_runs row then
    failed_page: str  # the Reconciliation page then
    tasks: dict[str, tuple[str | None, int]]  # its tasks once the clear re-ran it
    statuses: list[str]  # its pipeline_runs status, each change seen while it re-ran
    passed_row: list[tuple]
    passed_page: str
    seconds: float  # what this section adds to the module after the backfill


def reconciliation_page(live: Live) -> str:
    """The plugin's Reconciliation page as the API server serves it to a logged-in user."""
    base = live.home.env["AIRFLOW__API__BASE_URL"]
    passwords = Path(live.home.env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    login = {"username": "admin", "password": json.loads(passwords.read_text())["admin"]}
    token = http_json("POST", f"{base}/auth/token", login)["access_token"]
    req = urllib.request.Request(f"{base}/auditsync/", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read().decode()


@pytest.fixture(scope="module")
def cleared(live, broken_landing, pg_url) -> Cleared:
    """The broken segment fails the next scheduled run's compact for good; once it is moved
    away, the operator clears that run's compact and what follows, and the run passes. Last in
    the module (its test is the file's last), or alone (``-k compact_failed``)."""
    started = time.monotonic()
    broken_landing.write()  # written by the outage; alone, now: the first scheduled run fails
    failed = wait_until(broken_landing.failed_run, RUNS_TIMEOUT_S, "a run's compact to fail")
    wait_until(lambda: live.meta.run(failed.run_id).state == "failed", 300, "the run to fail")
    failed_row = pg_rows(pg_url, FAILED_RUN_SQL, failed.pipeline_run_id)
    failed_page = reconciliation_page(live)
    live.api(
        "POST",
        f"/api/v2/dags/{DAG}/clearTaskInstances",
        {
            "dry_run": False,
            "dag_run_id": failed.run_id,
            "task_ids": ["compact"],
            "include_downstream": True,
            "only_failed": False,
        },
    )
    statuses = [row[0] for row in failed_row]

    def passed() -> bool:
        [(status, _, _)] = pg_rows(pg_url, FAILED_RUN_SQL, failed.pipeline_run_id)
        if not statuses or statuses[-1] != status:
            statuses.append(status)
        run = live.meta.run(failed.run_id)
        if run.state == "failed" and status == "failed" and "running" in statuses:
            raise AssertionError(f"{run} failed again: {live.meta.tasks(failed.run_id)}")
        return run.state == "success"

    wait_until(passed, RUNS_TIMEOUT_S, f"{failed.run_id} to pass once cleared")
    return Cleared(
        failed,
        failed_row,
        failed_page,
        live.meta.tasks(failed.run_id),
        statuses,
        pg_rows(pg_url, FAILED_RUN_SQL, failed.pipeline_run_id),
        reconciliation_page(live),
        time.monotonic() - started,
    )


def test_a_compact_failed_for_good_says_so_and_passes_once_cleared(live, cleared):
    print(f"[live] the failed-and-cleared run added {cleared.seconds:.0f} s")
    run_id = cleared.run.pipeline_run_id
    [(status, step, reason)] = cleared.failed_row
    assert (status, step) == ("failed", "compact")
    assert "\n" not in reason and 0 < len(reason) <= 300, reason
    shown = (
        f'<div class="failure bad">failed in <b class="failed-step">compact</b>: '
        f'<span class="failure-reason">{html.escape(reason)}</span></div>'
    )
    assert shown in cleared.failed_page
    # Cleared: start_run (compact's setup) ran again, so the run went back to running, then
    # every task passed on its second try and the failure is forgotten.
    assert cleared.statuses[0] == "failed" and cleared.statuses[-2:] == ["running", "passed"]
    assert {t: s for t, (s, _) in cleared.tasks.items()} == dict.fromkeys(TASKS, "success")
    tries = {t: n for t, (_, n) in cleared.tasks.items()}
    # compact failed and ran again, start_run (its setup) and finish_run (its teardown) with
    # it; the sensor, upstream of the setup, was not cleared.
    assert [tries[t] for t in ("wait_for_sinks", "start_run", "compact", "finish_run")] == [
        1,
        2,
        2,
        2,
    ]
    assert cleared.passed_row == [("passed", None, None)]
    assert f"<td>{run_id}" in cleared.passed_page
    assert shown not in cleared.passed_page
