"""The package installed as a user's Airflow would hold it: a fresh venv with only uv.lock's
``apache-airflow`` (and the locked dependencies of our ``airflow`` and ``pipeline`` extras) and
the wheel, no folder copied, nothing of the checkout on ``sys.path``. Airflow finds the provider
(``apache_airflow_provider``), the UI plugin (``airflow.plugins``) and the four DAGs (the DAG
bundle ``auditsync_plugin.bundle.AuditsyncDagBundle``, one setting), and ``airflow dags test
audit_sync`` passes there against the session's PostgreSQL, watch service and Spark Connect
server, on a landing zone the real sink writes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from watch_service.settings import Settings
from watch_service.tools.airflow_env import airflow_env

from ..support import unique
from .clean_venv import CleanVenv, build
from .conftest import AUDIT_SYNC_TASKS as TASKS
from .conftest import _append, http_json, pg_rows, pipeline_run_id
from .test_landing_retention import sink_until_caught_up

pytestmark = [pytest.mark.airflow, pytest.mark.e2e, pytest.mark.timeout(1500)]
DAGS = ["audit_full", "audit_sync", "maintenance", "retention"]
# What docs/airflow.md tells a user to set, verbatim.
BUNDLES = (
    '[{"name": "auditsync", "classpath": "auditsync_plugin.bundle.AuditsyncDagBundle", '
    '"kwargs": {}}]'
)
DATE = "2025-08-01T12:05:00+00:00"  # interval [11:45, 12:00)


class CleanAirflow:
    def __init__(self, venv: CleanVenv, local: Path, env: dict[str, str]) -> None:
        self.venv, self.local, self.env = venv, local, env

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.venv.bin / "airflow"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.local,
        )

    def json(self, *args: str) -> list[dict]:
        out = self.run(*args, "--output", "json")
        assert out.returncode == 0, out.stderr[-3000:]
        # Airflow's warnings (graphviz missing …) go to stdout before the document's line.
        [doc] = [line for line in out.stdout.splitlines() if line.startswith(("[{", "[]"))]
        return json.loads(doc)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, pg_url, watch_service, spark_connect) -> CleanAirflow:
    base = tmp_path_factory.mktemp("clean-install")
    venv = build(base)
    local = base / "local"
    _, connect = spark_connect
    env = airflow_env(
        Settings(local_dir=local, database_url=pg_url),
        {
            "AUDITSYNC_WATCH_URL": watch_service.url,
            "AUDITSYNC_SPARK_MASTER": "local[2]",
            "AUDITSYNC_SENSOR_TIMEOUT_S": "120",
            "AUDITSYNC_SPARK_CONNECT": connect.url,
        },
        project_root=base / "no-checkout",
        python=str(venv.python),
    )
    # No dags folder: the DAGs come from the installed package's bundle alone.
    env.pop("AIRFLOW__CORE__DAGS_FOLDER")
    env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = BUNDLES
    home = CleanAirflow(venv, local, {**venv.env(dict(os.environ)), **env})
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True)
    out = home.run("db", "migrate", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return home


def test_nothing_of_the_checkout_is_imported(clean):
    code = "import auditsync_plugin as a, spark_jobs as s; print(a.__file__, s.__file__)"
    out = subprocess.run(
        [str(clean.venv.python), "-c", code],
        env=clean.env,
        capture_output=True,
        text=True,
        cwd=clean.local,
        check=True,
    )
    site = str(clean.venv.path / "lib")
    assert [p.startswith(site) for p in out.stdout.split()] == [True, True], out.stdout


def test_providers_list_shows_auditsync(clean):
    [ours] = [p for p in clean.json("providers", "list") if p["package_name"] == "auditsync"]
    assert ours["version"] == "0.1.0"


def test_plugins_shows_the_ui_plugin_once(clean):
    plugins = {p["name"]: p for p in clean.json("plugins")}
    # ours once, beside the openlineage provider's listener (the airflow extra installs it)
    assert sorted(plugins) == ["OpenLineageProviderPlugin", "auditsync"]
    assert "group='airflow.plugins'" in plugins["auditsync"]["source"]
    assert "'url_prefix': '/auditsync'" in str(plugins["auditsync"]["fastapi_apps"])


def test_dags_list_shows_the_four_dags_from_the_package(clean):
    out = clean.run("dags", "reserialize", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    dags = clean.json("dags", "list")
    assert sorted(d["dag_id"] for d in dags) == DAGS
    assert {d["bundle_name"] for d in dags} == {"auditsync"}
    package_dags = clean.venv.path / "lib" / "python3.11" / "site-packages" / "auditsync_plugin"
    assert {Path(d["fileloc"]).parent for d in dags} == {package_dags / "dags"}


def test_dags_test_audit_sync_passes(clean, watch_service, pg_url):
    landing = clean.local / "landing"
    topic, consumer = unique("clean"), unique("ci")
    http_json("PUT", f"{watch_service.url}/v0/topics/{topic}", {})
    _append(watch_service.url, topic, 150)
    sink_until_caught_up(watch_service.url, pg_url, topic, consumer, landing)
    started = time.monotonic()
    out = clean.run("dags", "test", "audit_sync", DATE, timeout=1200)
    output = out.stdout + out.stderr
    (clean.local / "dags-test.log").write_text(output)
    assert out.returncode == 0, output[-5000:]
    with sqlite3.connect(clean.local / "airflow" / "airflow.db") as db:
        states = dict(
            db.execute(
                "SELECT task_id, state FROM task_instance WHERE dag_id = 'audit_sync'"
            ).fetchall()
        )
    assert states == dict.fromkeys(TASKS, "success")
    run_id = pipeline_run_id("20250801T114500Z", "20250801T120000Z")
    [(status, remaining)] = pg_rows(
        pg_url,
        "SELECT status, defects_remaining FROM pipeline_runs WHERE run_id = %s",
        run_id,
    )
    assert (status, remaining) == ("passed", 0)
    print(f"clean-install dags test: {time.monotonic() - started:.0f} s")
