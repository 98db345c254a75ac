"""A real Spark standalone cluster on loopback (a master and one worker, from the pyspark
installation), for the DAG's spark-submit path through ``spark_default``; stopped by PID, the
worker first."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..support import TEST_JVM_OPTIONS, free_port, stop

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:PORT
    ui_port: int

    def state(self) -> dict:
        """The master's /json/ view (workers, running and completed applications)."""
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return json.loads(r.read())
        return {}

    def completed_apps(self) -> list[str]:
        return [a["name"] for a in self.state().get("completedapps", [])]


def _daemon(cls: str, args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(BIN / "spark-class"), cls, *args], env=env, stdout=out, stderr=out
        )


@contextlib.contextmanager
def standalone_cluster(base: Path, timeout: float = 90) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1 GiB) under ``base``, up until the block ends."""
    base.mkdir(parents=True, exist_ok=True)
    props = base / "master.properties"
    props.write_text("spark.master.rest.enabled false\n")
    import pyspark

    env = {
        **os.environ,
        # spark-class finds its home with the python on PATH, which need not be this venv's
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(base / "work"),
        "SPARK_LOCAL_DIRS": str(base / "local"),
        "SPARK_DAEMON_MEMORY": "256m",
        # The master and the worker are JVMs the tests start too: C1-only JIT and the serial
        # collector, as every other test JVM (``support.TEST_JVM_OPTIONS``). The launcher
        # gives daemons SPARK_DAEMON_JAVA_OPTS, not SPARK_SUBMIT_OPTS; the executors the worker
        # launches get the same options from the application (spark.executor.extraJavaOptions).
        "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS,
    }
    port, ui, worker_ui = free_port(), free_port(), free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", ui)
    procs: list[subprocess.Popen] = []
    try:
        procs.append(
            _daemon(
                "org.apache.spark.deploy.master.Master",
                ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)]
                + ["--properties-file", str(props)],
                env,
                base / "master.log",
            )
        )
        procs.append(
            _daemon(
                "org.apache.spark.deploy.worker.Worker",
                [cluster.url, "--host", "127.0.0.1", "--cores", "1", "--memory", "1g"]
                + ["--webui-port", str(worker_ui), "--work-dir", str(base / "work")],
                env,
                base / "worker.log",
            )
        )
        deadline = time.monotonic() + timeout
        while cluster.state().get("aliveworkers", 0) < 1:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "".join((base / f).read_text()[-1500:] for f in ("master.log", "worker.log"))
                raise AssertionError(f"no live Spark worker within {timeout}s:\n{logs}")
            time.sleep(0.2)
        yield cluster
    finally:
        for proc in reversed(procs):
            stop(proc, 20)
