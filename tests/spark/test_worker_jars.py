"""``AUDITSYNC_SPARK_WORKER_JARS`` names a folder where every Spark worker holds the pinned jars,
so a cluster's executors load them from their own disk instead of fetching 660 MB from each
driver. A worker without them is found by the step's session before any work, in one message
that names the setting, the executor's host and each jar it lacks; before, the step's first
Iceberg task failed with a ClassNotFoundException from inside the executor.

The cluster is Spark's own ``local-cluster`` master: a master, a worker and an executor JVM of
their own, the executor started with the class path ``submit_flags`` gives it. The step is the
real ``verify`` job, submitted as the DAG submits it (``AUDITSYNC_SPARK_JARS_PLACED``). The
pass case, a worker that holds the jars, is the standalone cluster's DAG run
(tests/airflow/test_phantom.py), whose five steps each ask the same question.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from auditsync_plugin.step_args import application
from spark_jobs.common import jars
from spark_jobs.common.session import JARS_PLACED_ENV, WORKER_JARS_ENV, submit_flags

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]
MASTER = "local-cluster[1,1,512]"  # one worker, one core, 512 MiB


def test_a_worker_without_the_jars_stops_the_step_before_its_work(tmp_path) -> None:
    empty = tmp_path / "jars-on-the-worker"
    empty.mkdir()
    env = {
        **os.environ,
        WORKER_JARS_ENV: str(empty),
        JARS_PLACED_ENV: "1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "PYTHONPATH": str(REPO),
    }
    flags = submit_flags(env, master=MASTER)
    assert f"spark.executor.extraClassPath={empty}/{jars.ICEBERG.file_name}" in " ".join(flags)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            MASTER,
            "--conf",
            "spark.executor.memory=512m",
            *flags,
            application(REPO, "verify"),  # what the DAG's spark-submit runs
            "--work",
            str(tmp_path / "warehouse"),
            "--run-id",
            "never-started",
            "--database-url",
            "postgresql://nobody@127.0.0.1:1/none",  # never reached
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    # spark-submit passes the Python driver's stderr to its stdout.
    [message] = [x for x in proc.stdout.splitlines() if x.startswith("spark_jobs.common.session")]
    names = ", ".join(j.file_name for j in jars.SPARK_JARS)
    assert message.startswith(
        f"spark_jobs.common.session.WorkerJarsMissing: {WORKER_JARS_ENV}={empty}: Spark "
        "executors cannot load pinned jars from that folder on their workers ("
    ), message
    assert message.endswith(
        f": {names}). Put the jars there on every worker (`make setup` fetches them into "
        f".local/jars), or unset {WORKER_JARS_ENV} to send them with each application."
    ), message
    assert not (tmp_path / "warehouse").exists()  # nothing of the step's work was done
