"""A live Airflow for the tests: its components as OS processes (started and stopped by PID),
what its metadata database says about DAG runs and task instances, and writers that keep
appending to the watch service while it schedules.

``test_operations.py`` runs a probe DAG on it; ``test_live_schedule.py`` (on branch
``live-airflow``, not yet in the suite) the real ``audit_sync`` on a one-minute schedule.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

from .conftest import BIN, AirflowHome, http_json, wait_until

STOP_TIMEOUT_S = 60.0


def start(home: AirflowHome, name: str, *args: str) -> subprocess.Popen:
    """``airflow ARGS…`` in the background, its output appended to ``<local>/<name>.log``."""
    with open(home.local / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [str(BIN / "airflow"), *args],
            env=home.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=home.local,
        )


def stop(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM the process (SIGKILL after ``timeout``); its exit status."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def utc(text: str | None) -> datetime | None:
    """A timestamp as SQLite holds Airflow's (UTC, ``YYYY-MM-DD HH:MM:SS[.ffffff]``)."""
    if text is None:
        return None
    return datetime.fromisoformat(text.replace(" ", "T")).replace(tzinfo=None)


@dataclasses.dataclass(frozen=True)
class DagRun:
    id: int
    run_id: str
    state: str
    run_type: str
    start: datetime  # data interval
    end: datetime
    started: datetime | None
    ended: datetime | None
    backfill_id: int | None

    @property
    def pipeline_run_id(self) -> str:
        """The pipeline's run id audit_sync derives from the data interval (``RUN_ID``)."""
        return f"audit_sync_{self.start:%Y%m%dT%H%M%SZ}_{self.end:%Y%m%dT%H%M%SZ}"


class Metadata:
    """Reads of Airflow's metadata database (SQLite, read-only) about one DAG."""

    def __init__(self, home: AirflowHome, dag_id: str) -> None:
        self.path = Path(home.env["AIRFLOW_HOME"]) / "airflow.db"
        self.dag_id = dag_id

    def _rows(self, sql: str, *params: object) -> list[tuple]:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql, params).fetchall()

    def runs(self) -> list[DagRun]:
        rows = self._rows(
            "SELECT id, run_id, state, run_type, data_interval_start, data_interval_end, "
            "start_date, end_date, backfill_id FROM dag_run WHERE dag_id = ? ORDER BY id",
            self.dag_id,
        )
        return [
            DagRun(i, r, s, t, utc(a), utc(b), utc(c), utc(d), bf)  # type: ignore[arg-type]
            for i, r, s, t, a, b, c, d, bf in rows
        ]

    def run(self, run_id: str) -> DagRun:
        [found] = [r for r in self.runs() if r.run_id == run_id]
        return found

    def tasks(self, run_id: str) -> dict[str, tuple[str | None, int]]:
        """task_id → (state, try_number) of one DAG run."""
        rows = self._rows(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?",
            self.dag_id,
            run_id,
        )
        return {t: (s, n) for t, s, n in rows}

    def task_ended(self, run_id: str, task_id: str) -> datetime | None:
        rows = self._rows(
            "SELECT end_date FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            self.dag_id,
            run_id,
            task_id,
        )
        return utc(rows[0][0]) if rows else None

    def history(self, run_id: str, task_id: str) -> list[tuple[int, str | None]]:
        """(try_number, state) of a task's earlier tries (``task_instance_history``)."""
        return self._rows(
            "SELECT try_number, state FROM task_instance_history "
            "WHERE dag_id = ? AND run_id = ? AND task_id = ? ORDER BY try_number",
            self.dag_id,
            run_id,
            task_id,
        )

    def backfill_done(self, backfill_id: int) -> bool:
        rows = self._rows("SELECT completed_at FROM backfill WHERE id = ?", backfill_id)
        return bool(rows) and rows[0][0] is not None

    def exists(self) -> bool:
        return bool(self._rows("SELECT 1 FROM dag WHERE dag_id = ?", self.dag_id))


def task_log(home: AirflowHome, dag_id: str, run_id: str, task_id: str, attempt: int) -> list[dict]:
    """One try's task log (JSON lines) as Airflow's task runner wrote it."""
    path = (
        Path(home.env["AIRFLOW_HOME"])
        / "logs"
        / f"dag_id={dag_id}"
        / f"run_id={run_id}"
        / f"task_id={task_id}"
        / f"attempt={attempt}.log"
    )
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


class Writers:
    """Appends ``batch`` records to each topic every ``every_s`` in a background thread, at most
    ``limit`` per topic, and keeps (monotonic time, first_seq, last_seq) of every append."""

    def __init__(
        self, url: str, topics: list[str], batch: int = 2, every_s: float = 0.5, limit: int = 3000
    ) -> None:
        self.url, self.topics = url, topics
        self.batch, self.every_s, self.limit = batch, every_s, limit
        self.appends: dict[str, list[tuple[float, int, int]]] = {t: [] for t in topics}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writers", daemon=True)

    def _run(self) -> None:
        n = 0
        try:
            while n < self.limit:
                for topic in self.topics:
                    body = {
                        "records": [
                            {"data": {"n": n + i, "writer": "live"}, "tag": f"k{(n + i) % 13}"}
                            for i in range(self.batch)
                        ]
                    }
                    out = http_json("POST", f"{self.url}/v0/topics/{topic}/records", body)
                    self.appends[topic].append(
                        (time.monotonic(), out["first_seq"], out["last_seq"])
                    )
                n += self.batch
                if self._stop.wait(self.every_s):  # the pace of the writers, not a wait on state
                    return
        except BaseException as exc:
            self.error = exc

    def start(self) -> Writers:
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        """Stop writing; each topic's last seq written."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive() and self.error is None, self.error
        return {t: a[-1][2] for t, a in self.appends.items() if a}

    def written(self, topic: str, after_seq: int, through_seq: int) -> int:
        """How many of the seqs written to ``topic`` lie in ``(after_seq, through_seq]``."""
        return sum(
            max(0, min(last, through_seq) - max(first - 1, after_seq))
            for _, first, last in self.appends[topic]
        )

    def written_between(self, topic: str, since: float, until: float) -> int:
        """Records appended to ``topic`` between two ``time.monotonic()`` readings."""
        return sum(
            last - first + 1 for t, first, last in self.appends[topic] if since <= t <= until
        )


def wait_for_runs(meta: Metadata, count: int, timeout: float, what: str) -> list[DagRun]:
    """Until ``count`` runs succeeded; fails at once, naming its tasks, when one fails."""

    def done() -> list[DagRun] | None:
        runs = meta.runs()
        failed = [r for r in runs if r.state == "failed" and r.backfill_id is None]
        if failed:
            raise AssertionError(f"{failed[0]} failed: {meta.tasks(failed[0].run_id)}")
        passed = [r for r in runs if r.state == "success" and r.run_type == "scheduled"]
        return passed if len(passed) >= count else None

    return wait_until(done, timeout, what)  # type: ignore[return-value]
