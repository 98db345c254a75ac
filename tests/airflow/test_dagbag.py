"""The DAG files parse without errors, fast, and without touching the network, a database or
heavy libraries; the plugin loads; the wiring is what the design says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from watch_service.settings import Settings
from watch_service.tools.airflow_env import airflow_env

pytestmark = pytest.mark.airflow
ROOT = Path(__file__).resolve().parents[2]
# The pipeline's database, when the connection auditsync_pipeline exists (issue 32).
PIPELINE_URI = (
    "{{ conn.get('auditsync_pipeline').get_uri() if conn.get('auditsync_pipeline') else '' }}"
)


def probe(tmp_path_factory, extra: dict[str, str] | None = None) -> dict:
    home = tmp_path_factory.mktemp("parse-home")
    env = {
        **os.environ,
        **airflow_env(
            Settings(local_dir=home, database_url="postgresql://nobody@127.0.0.1:1/none"),
            {"AUDITSYNC_WATCH_URL": "http://127.0.0.1:1"},
        ),
    }
    # A metadata DB that cannot exist: any parse-time Variable/Connection lookup would fail.
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = "sqlite:////nonexistent/dir/airflow.db"
    env.update(extra or {})
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("parse_probe.py")), str(ROOT / "dags")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=home,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict:
    return probe(tmp_path_factory)


def test_a_bad_keep_runs_setting_is_an_import_error_naming_it(tmp_path_factory):
    errors = probe(tmp_path_factory, {"AUDITSYNC_KEEP_RUNS": "-3"})["import_errors"]
    [(path, text)] = errors.items()
    assert path.endswith("audit_sync.py")
    assert "AUDITSYNC_KEEP_RUNS: must keep at least 1 run (the current one), got -3" in text


def test_no_import_errors_and_both_dags(parsed):
    assert parsed["import_errors"] == {}
    assert parsed["dags"] == ["audit_full", "audit_sync", "maintenance", "retention"]
    # ours, beside the openlineage provider's listener plugin
    assert parsed["plugins"] == ["OpenLineageProviderPlugin", "auditsync"]
    assert parsed["plugin_errors"] == {}


def test_parsing_does_no_io_and_no_heavy_imports(parsed):
    assert parsed["network_attempts"] == []
    assert parsed["heavy_imports"] == []
    # The UI app is built only when the API server asks for it.
    assert parsed["fastapi_imported_by_plugin_load"] is False
    assert parsed["parse_s"] < 10, parsed["parse_s"]


def test_the_pipeline_wiring(parsed):
    backfill = ["backfill_audit_log", "backfill_search_index"]
    assert parsed["tasks"] == {
        "wait_for_sinks": ["start_run"],
        "start_run": ["compact", "finish_run"],
        "compact": ["reconcile"],
        "reconcile": backfill,
        **{b: ["verify"] for b in backfill},
        "verify": ["quality"],
        "quality": ["publish"],
        "publish": ["finish_run"],
        "finish_run": [],
    }
    assert parsed["teardowns"] == ["finish_run"]  # it prunes whatever the run's outcome
    assert parsed["catchup"] is False and parsed["doc_md"]
    assert parsed["schedule"] == ["CronDataIntervalTimetable", "*/15 * * * *"]
    spark_submit = str(Path(sys.executable).with_name("spark-submit"))
    assert sorted(parsed["spark"]) == sorted(["compact", "reconcile", *backfill, "verify"])
    from spark_jobs.common.session import classpath

    for task, (conn_id, binary, jars) in parsed["spark"].items():
        assert (conn_id, binary, jars) == ("spark_default", spark_submit, ",".join(classpath())), (
            task
        )
    assert parsed["outlets"] == [
        "auditsync_audit_log",
        "auditsync_quality_report",
        "auditsync_reconciliation",
        "auditsync_search_index",
        # the alias the run's tables are published under, named as lineage names them
        "auditsync_warehouse_tables",
    ]


def test_deadline_retries_and_no_alert_callbacks_by_default(parsed):
    """A data interval must be verified within 3 × the schedule of its end: the deadline is
    measured from the logical date (the interval's start), so 15 + 45 minutes. Every task
    retries transient faults only; alerts are off, so the one callback a task carries is the
    run lifecycle's: a task after start_run that fails for good marks the run failed."""
    assert parsed["deadline"] == [
        [
            "DagRunLogicalDateDeadline",
            3600.0,
            "auditsync_plugin.notifications.notifiers.deadline_missed",
        ]
    ]
    assert set(parsed["retries"]) == set(parsed["tasks"])
    assert all(r == [3, "TransientFaultPolicy"] for r in parsed["retries"].values())
    assert parsed["callbacks"] == {
        **{t: ["on_failure_callback:RunFailed"] for t in parsed["tasks"]},
        **{t: [] for t in ("wait_for_sinks", "start_run", "finish_run")},
    }


def test_the_maintenance_wiring(parsed):
    """One Spark step, daily, over the audit_sync warehouse; the URL in its environment; then
    landing retention over the audit_sync landing."""
    assert parsed["maintenance"] == {
        "schedule": "@daily",
        "tasks": {
            "maintenance": [
                "SparkStepOperator",
                "maintenance",
                [
                    "--work",
                    "{{ var.value.auditsync_warehouse }}",
                    "--snapshot-retention-hours",
                    "168",
                    "--target-file-size-mb",
                    "128",
                ],
            ],
            "landing_retention": [
                "LandingRetentionOperator",
                "{{ var.value.auditsync_landing }}",
                "{{ var.value.auditsync_warehouse }}",
                "168",
            ],
        },
        "downstream": {"maintenance": [], "landing_retention": []},
        "env": {
            "maintenance": {
                "AUDITSYNC_DATABASE_URL": "{{ conn.auditsync_pg.get_uri() }}",
                "AUDITSYNC_PIPELINE_DATABASE_URL": PIPELINE_URI,
            }
        },
    }


def test_no_credentials_in_process_arguments(parsed):
    """The database URL reaches the Spark steps in their environment, never in argv (``ps``);
    so does verify's audit-log signing key (the connection auditsync_log_key's password)."""
    assert len(parsed["spark_argv"]) == 5
    key = (
        "{{ (conn.get('auditsync_log_key').password or '') "
        "if conn.get('auditsync_log_key') else '' }}"
    )
    for task, argv in parsed["spark_argv"].items():
        assert not any("database-url" in a or "get_uri" in a for a in argv), (task, argv)
        assert not any("log_key" in a for a in argv), (task, argv)
        assert parsed["spark_env"][task] == {
            "AUDITSYNC_DATABASE_URL": "{{ conn.auditsync_pg.get_uri() }}",
            "AUDITSYNC_PIPELINE_DATABASE_URL": PIPELINE_URI,
            **({"AUDITSYNC_LOG_SIGNING_KEY": key} if task == "verify" else {}),
        }, task


def test_a_users_jdbc_jar_is_respected(tmp_path, monkeypatch):
    """Neither the DAG nor Airflow's environment decide the JDBC driver: the jobs' lookup does,
    and it takes the user's AUDITSYNC_JDBC_JAR first."""
    jar = tmp_path / "my-postgresql.jar"
    jar.write_bytes(b"PK")
    env = airflow_env(Settings(local_dir=tmp_path), {"AUDITSYNC_JDBC_JAR": str(jar)})
    assert env["AUDITSYNC_JDBC_JAR"] == str(jar)
    assert "AUDITSYNC_JDBC_JAR" not in airflow_env(Settings(local_dir=tmp_path), {})
    from auditsync_plugin.operators.spark_step import SparkStepOperator

    monkeypatch.setenv("AUDITSYNC_JDBC_JAR", str(jar))
    op = SparkStepOperator(task_id="t", step="compact", application="x.py")
    assert op.jars.split(",")[-1] == str(jar) and op.packages is None


def test_the_jars_go_where_the_masters_executors_load_them(tmp_path, monkeypatch):
    """Sent with the application (``--jars``), the pinned jars (660 MB) were fetched by every
    executor of every spark-submit. A local master's executors run in the driver's JVM: the
    jars go on its class path. A cluster's workers that hold the jars
    (``AUDITSYNC_SPARK_WORKER_JARS``) load them from there. Only otherwise are they sent."""
    from auditsync_plugin.operators.spark_step import SparkStepOperator
    from spark_jobs.common.session import WORKER_JARS_ENV, classpath, submit_options

    monkeypatch.delenv(WORKER_JARS_ENV, raising=False)
    monkeypatch.delenv("AUDITSYNC_JDBC_JAR", raising=False)
    paths = classpath()
    local = submit_options(master="local[2]")
    assert (local["jars"], local["driver_class_path"]) == (None, os.pathsep.join(paths))
    assert "spark.executor.extraClassPath" not in local["conf"]
    sent = submit_options(master="spark://spark-master:7077")
    assert (sent["jars"], sent["driver_class_path"]) == (",".join(paths), None)
    jar = tmp_path / "my-postgresql.jar"
    jar.write_bytes(b"PK")
    env = {
        **os.environ,
        WORKER_JARS_ENV: "/opt/auditsync/.local/jars/",
        "AUDITSYNC_JDBC_JAR": str(jar),
    }
    held = submit_options(env, master="spark://spark-master:7077")
    assert held["jars"] is None
    assert held["driver_class_path"] == os.pathsep.join(classpath(env))
    on_workers = held["conf"]["spark.executor.extraClassPath"].split(":")
    assert on_workers == [
        str(jar) if p == str(jar) else f"/opt/auditsync/.local/jars/{Path(p).name}"
        for p in classpath(env)
    ]
    assert str(jar) in on_workers and len(on_workers) == len(paths)
    for bad in ("jars", "./jars", "~/jars"):
        with pytest.raises(ValueError, match=f"^{WORKER_JARS_ENV}="):
            submit_options({**os.environ, WORKER_JARS_ENV: bad}, master="spark://m:7077")
    # The operator places them at execute time, for its connection's master.
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    op = SparkStepOperator(
        task_id="t", step="compact", application="x.py", conf={"spark.task.maxFailures": "2"}
    )
    assert op.jars == ",".join(paths)  # parsing knows no master
    op.place_jars()
    assert (op.jars, op.driver_class_path) == (None, os.pathsep.join(paths))
    assert op.conf["spark.task.maxFailures"] == "2"
    # The job's session then names no jars of its own (a spark-submit by hand still does).
    assert op.env_vars == {"AUDITSYNC_SPARK_JARS_PLACED": "1"}


def test_a_spark_connect_server_refuses_a_relative_worker_jars_folder(monkeypatch, capsys):
    """The Spark Connect server takes its jar flags from the same placement: a malformed
    ``AUDITSYNC_SPARK_WORKER_JARS`` is one line naming it and exit 2, before any JVM starts."""
    from spark_jobs.common.session import WORKER_JARS_ENV, submit_flags
    from watch_service.tools import spark_connect

    monkeypatch.setenv(WORKER_JARS_ENV, "jars")
    assert spark_connect.main(["serve", "--master", "spark://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"auditsync spark-connect: {WORKER_JARS_ENV}='jars': an absolute path on the Spark "
        "workers is expected\n"
    )
    monkeypatch.setenv(WORKER_JARS_ENV, "/opt/jars")
    flags = submit_flags(master="spark://127.0.0.1:9")
    assert "--jars" not in flags and "--driver-class-path" in flags
    assert any(f.startswith("spark.executor.extraClassPath=/opt/jars/") for f in flags)
