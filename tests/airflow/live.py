"""A live Airflow's components as OS processes for the tests, started and stopped by PID
(``test_operations.py`` runs a probe DAG on them). The live-scheduler test of the real
``audit_sync`` and its metadata readers and writers are on branch ``live-airflow``."""

from __future__ import annotations

import signal
import subprocess
import urllib.request

from .conftest import BIN, AirflowHome

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
