"""A live Airflow for the tests: its components as OS processes (started and stopped by PID),
a metadata database of its own in the session's PostgreSQL and what it says about DAG runs and
task instances, and writers that keep appending to the watch service while it schedules.

``test_operations.py`` runs a probe DAG on it; ``test_live_schedule.py`` the real
``audit_sync`` on a one-minute schedule; ``tests/e2e/test_four_machines.py`` takes its metadata
database from here too.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ..support import unique
from .conftest import BIN, AirflowHome, http_json, wait_until


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


def ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def airflow_database(pg_url: str) -> str:
    """A fresh database for Airflow's metadata in the session's cluster, as a SQLAlchemy URL
    (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``): no SQLite lock between the scheduler, the API
    server and an operator's CLI."""
    name = unique("airflow").replace("-", "_")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = {**conninfo_to_dict(pg_url), "dbname": name}
    user = info.get("user", "postgres")
    return f"postgresql+psycopg2://{user}@{info['host']}:{info['port']}/{name}"


def utc(value: datetime | None) -> datetime | None:
    """One of Airflow's timestamps (``timestamptz``) as naive UTC."""
    return None if value is None else value.astimezone(UTC).replace(tzinfo=None)


@dataclasses.dataclass(frozen=True)
class DagRun:
    id: int
    run_id: str
    state: str
    run_type: str
    start: datetime  # data interval, naive UTC
    end: datetime
    started: datetime | None
    ended: datetime | None
    backfill_id: int | None

    @property
    def pipeline_run_id(self) -> str:
        """The pipeline's run id audit_sync derives from the data interval (``RUN_ID``)."""
        return f"audit_sync_{self.start:%Y%m%dT%H%M%SZ}_{self.end:%Y%m%dT%H%M%SZ}"


class Metadata:
    """Reads of Airflow's metadata database (PostgreSQL) about one DAG, on one connection."""

    def __init__(self, sqlalchemy_url: str, dag_id: str) -> None:
        self.url = sqlalchemy_url.replace("postgresql+psycopg2://", "postgresql://", 1)
        self.dag_id = dag_id
        self._conn: psycopg.Connection | None = None

    def _rows(self, query: str, *params: object) -> list[tuple]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, autocommit=True)
        return self._conn.execute(query, params).fetchall()  # type: ignore[arg-type]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def runs(self) -> list[DagRun]:
        rows = self._rows(
            "SELECT id, run_id, state, run_type, data_interval_start, data_interval_end, "
            "start_date, end_date, backfill_id FROM dag_run WHERE dag_id = %s ORDER BY id",
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
            "SELECT task_id, state, try_number FROM task_instance "
            "WHERE dag_id = %s AND run_id = %s",
            self.dag_id,
            run_id,
        )
        return {t: (s, n) for t, s, n in rows}

    def tasks_in(self, *states: str) -> list[tuple[str, str, str]]:
        """(run_id, task_id, state) of the DAG's task instances in one of ``states``."""
        return self._rows(
            "SELECT run_id, task_id, state FROM task_instance "
            "WHERE dag_id = %s AND state = ANY(%s) ORDER BY 1, 2",
            self.dag_id,
            list(states),
        )

    def task_ended(self, run_id: str, task_id: str) -> datetime | None:
        rows = self._rows(
            "SELECT end_date FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
            self.dag_id,
            run_id,
            task_id,
        )
        return utc(rows[0][0]) if rows else None

    def history(self, run_id: str, task_id: str) -> list[tuple[int, str | None]]:
        """(try_number, state) of a task's earlier tries (``task_instance_history``)."""
        return self._rows(
            "SELECT try_number, state FROM task_instance_history "
            "WHERE dag_id = %s AND run_id = %s AND task_id = %s ORDER BY try_number",
            self.dag_id,
            run_id,
            task_id,
        )

    def backfill_done(self, backfill_id: int) -> bool:
        rows = self._rows("SELECT completed_at FROM backfill WHERE id = %s", backfill_id)
        return bool(rows) and rows[0][0] is not None

    def exists(self) -> bool:
        return bool(self._rows("SELECT 1 FROM dag WHERE dag_id = %s", self.dag_id))


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
    ``limit`` per topic (a bound, far above what an hour writes), and keeps (monotonic time,
    first_seq, last_seq) of every append."""

    def __init__(
        self, url: str, topics: list[str], batch: int = 2, every_s: float = 0.5, limit: int = 20_000
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
    """Until ``count`` scheduled runs succeeded; fails at once, naming its tasks, when a
    scheduled run fails."""

    def done() -> list[DagRun] | None:
        runs = meta.runs()
        failed = [r for r in runs if r.state == "failed" and r.backfill_id is None]
        if failed:
            raise AssertionError(f"{failed[0]} failed: {meta.tasks(failed[0].run_id)}")
        passed = [r for r in runs if r.state == "success" and r.run_type == "scheduled"]
        return passed if len(passed) >= count else None

    return wait_until(done, timeout, what)  # type: ignore[return-value]
