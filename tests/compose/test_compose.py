"""docker-compose.yml cannot run here (no Docker engine), so it is checked by construction:
the services and their start order, PostgreSQL's settings, the Spark master URL the DAG
submits to, Airflow's configuration matching what ``airflow_env`` computes locally, and no
secret written into the file; the alert settings reach every Airflow service, off by default,
and turn alerts on as they do locally."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from watch_service.settings import Settings
from watch_service.tools.airflow_env import OVERRIDES, airflow_env, with_alerts

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "plugins") not in sys.path:  # as Airflow puts it
    sys.path.insert(0, str(ROOT / "plugins"))
SPARK_MASTER = "spark://spark-master:7077"
AIRFLOW_SERVICES = (
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
ALERTS_START = "python -m watch_service.tools.airflow_env --alerts "
# Every alert setting airflow_env takes (docs/operations.md's table lists the same).
ALERT_SETTINGS = sorted(
    k for k in OVERRIDES if k.startswith("AUDITSYNC_ALERT_") or k == "AUDITSYNC_VERIFY_DEADLINE_S"
)
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|TOKEN|_KEY)$")
REQUIRED_VAR = re.compile(r"^\$\{[A-Z_]+:\?[^}]*\}$")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def depends(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def command(service: dict) -> str:
    cmd = service.get("command", "")
    return " ".join(cmd) if isinstance(cmd, list) else cmd


def test_every_part_of_the_deployment_is_there(services):
    expected = {
        "postgres",
        "migrate",
        "watch",
        "sink",
        "spark-master",
        "spark-worker-1",
        "spark-worker-2",
        "spark-connect",
        "airflow-db",
        "airflow-init",
        *AIRFLOW_SERVICES,
    }
    assert expected <= set(services)
    workers = [n for n, s in services.items() if "deploy.worker.Worker" in command(s)]
    assert sorted(workers) == ["spark-worker-1", "spark-worker-2"]


def test_postgres_15_with_logical_wal_and_commit_timestamps(services):
    pg = services["postgres"]
    assert pg["image"].startswith("postgres:15")
    assert command(pg).split() == [
        "postgres",
        "-c",
        "wal_level=logical",
        "-c",
        "track_commit_timestamp=on",
    ]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])


def test_start_order(services):
    assert depends(services["migrate"]) == {"postgres": "service_healthy"}
    assert command(services["migrate"]) == "auditsync migrate"
    assert depends(services["watch"]) == {"migrate": "service_completed_successfully"}
    assert "--no-migrate" in command(services["watch"])
    assert depends(services["sink"]) == {
        "watch": "service_healthy",
        "objectstore": "service_healthy",
    }
    assert depends(services["airflow-init"]) == {"airflow-db": "service_healthy"}
    assert command(services["airflow-init"]) == "airflow db migrate"
    for name in AIRFLOW_SERVICES:
        deps = depends(services[name])
        assert deps["airflow-init"] == "service_completed_successfully", name
        assert deps["migrate"] == "service_completed_successfully", name
        assert deps["objectstore"] == "service_healthy", name
        started = command(services[name]).removeprefix(ALERTS_START)
        assert started.startswith(f"airflow {name.removeprefix('airflow-')}")
    assert depends(services["airflow-scheduler"])["spark-master"] == "service_started"
    for name in ("spark-worker-1", "spark-worker-2"):
        assert depends(services[name]) == {"spark-master": "service_started"}


def test_the_dag_submits_to_the_spark_master(services):
    master = services["spark-master"]
    assert master["hostname"] == "spark-master"
    assert "--host spark-master --port 7077" in command(master)
    for name in ("spark-worker-1", "spark-worker-2"):
        assert command(services[name]).split()[2] == SPARK_MASTER
    for name in AIRFLOW_SERVICES:
        conn = json.loads(services[name]["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert conn == {"conn_type": "spark", "host": SPARK_MASTER}


def test_the_steps_reach_a_spark_connect_server_on_the_cluster(services):
    server = services["spark-connect"]
    assert command(server).split()[:3] == ["auditsync", "spark-connect", "serve"]
    assert f"--master {SPARK_MASTER}" in command(server)
    assert "--port 15002" in command(server) and "--host 0.0.0.0" in command(server)
    assert server["environment"]["AWS_ENDPOINT_URL"] == "http://objectstore:9000"
    assert depends(services["airflow-scheduler"])["spark-connect"] == "service_healthy"
    for name in AIRFLOW_SERVICES:
        conn = json.loads(services[name]["environment"]["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
        assert conn == {"conn_type": "spark_connect", "host": "spark-connect", "port": 15002}
        # The JDBC driver is the image's (AUDITSYNC_JDBC_JAR), not decided per service.
        assert "AUDITSYNC_JDBC_JAR" not in services[name]["environment"]
    assert (
        "AUDITSYNC_JDBC_JAR=/usr/share/java/postgresql.jar"
        in services["watch"]["build"]["dockerfile_inline"]
    )


def test_nothing_is_shared_but_postgresql_and_the_object_store(compose, services):
    """The landing zone, the warehouse and the Great Expectations results are s3:// locations
    in the compose's real S3 server; no auditsync, Spark or Airflow process mounts a data
    volume."""
    assert "objectstore" in services and "objects" in compose["volumes"]
    store = services["objectstore"]
    assert "s3proxy-4.1.0-jar-with-dependencies.jar" in command(store)
    # nothing in its folder readable by others: S3Proxy then serves no unsigned request
    private = "umask 077 && mkdir -p /objects/auditsync && chmod -R go-rwx /objects &&"
    assert private in command(store)
    assert "objects:/objects" in store["volumes"]
    assert "--landing s3://auditsync/landing" in command(services["sink"])
    for name in ("sink", "spark-worker-1", "spark-worker-2", "spark-connect", *AIRFLOW_SERVICES):
        assert "data:/data" not in (services[name].get("volumes") or []), name
    for name in ("sink", "spark-worker-1", "spark-connect", *AIRFLOW_SERVICES):
        env = services[name]["environment"]
        assert env["AWS_ENDPOINT_URL"] == "http://objectstore:9000", name
        assert REQUIRED_VAR.match(env["AWS_SECRET_ACCESS_KEY"]), name
    env = services["airflow-scheduler"]["environment"]
    assert env["AIRFLOW_VAR_AUDITSYNC_LANDING"] == "s3://auditsync/landing"
    assert env["AIRFLOW_VAR_AUDITSYNC_WAREHOUSE"] == "s3://auditsync/warehouse"
    assert env["AIRFLOW_VAR_AUDITSYNC_GX_ROOT"] == "s3://auditsync/gx"
    assert "spark_jobs.common.jars" in services["watch"]["build"]["dockerfile_inline"]


def test_airflow_is_configured_like_the_local_setup(services, tmp_path):
    """Every connection, variable and auditsync setting airflow_env gives a local Airflow is
    also set for each Airflow service (with container values)."""
    local = airflow_env(Settings(local_dir=tmp_path))
    wanted = {
        k
        for k in local
        if k.startswith(
            (
                "AIRFLOW_CONN_",
                "AIRFLOW_VAR_",
                "AUDITSYNC_",
                "AIRFLOW__CORE__",
                "AIRFLOW__SCHEDULER__",
                "PYSPARK_",
            )
        )
    }
    for name in ("airflow-init", *AIRFLOW_SERVICES):
        env = services[name]["environment"]
        assert wanted - set(env) == set(), name
        for key in (
            "AIRFLOW__SCHEDULER__MP_START_METHOD",
            "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD",
        ):
            assert env[key] == local[key], (name, key)
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(
            "http://airflow-api-server:8080/"
        )
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@airflow-db:5432/airflow")
        watch = json.loads(env["AIRFLOW_CONN_AUDITSYNC_WATCH"])
        assert (watch["host"], watch["port"]) == ("watch", 8400)
        # The workers run the image that fetched the jars there: spark-submits send none.
        assert env["AUDITSYNC_SPARK_WORKER_JARS"] == "/opt/airflow/jars"
        assert services["spark-worker-1"]["image"] == services[name]["image"]


def test_alerts_are_off_by_default_and_reach_every_airflow_service(services):
    """Every alert setting is passed through from the environment (empty when unset: off);
    each Airflow service starts through ``airflow_env --alerts``, which gives it the same
    connections a local Airflow gets, so the DAG file reads the same channels."""
    from auditsync_plugin.notifications.notifiers import AlertSettings

    assert ALERT_SETTINGS == [
        "AUDITSYNC_ALERT_EMAIL",
        "AUDITSYNC_ALERT_FROM",
        "AUDITSYNC_ALERT_SMTP",
        "AUDITSYNC_ALERT_SMTP_CONN",
        "AUDITSYNC_ALERT_WEBHOOK",
        "AUDITSYNC_VERIFY_DEADLINE_S",
    ]
    hook = "https://hooks.slack.com/services/T0/B0/sekret"
    turned_on = {
        "AUDITSYNC_ALERT_EMAIL": "ops@example.com",
        "AUDITSYNC_ALERT_SMTP": "smtp+starttls://mailer:pw@mail.example:587",
        "AUDITSYNC_ALERT_WEBHOOK": hook,
        "AUDITSYNC_VERIFY_DEADLINE_S": "3600",
    }
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert command(services[name]).startswith(ALERTS_START + "airflow "), name
        assert {k: env[k] for k in ALERT_SETTINGS} == {k: f"${{{k}:-}}" for k in ALERT_SETTINGS}
        off = with_alerts({k: interpolate(str(v), {}) for k, v in env.items()})
        assert not AlertSettings.from_env(off).enabled, name
        assert not any(k.startswith("AIRFLOW_CONN_AUDITSYNC_SMTP") for k in off), name
        on = with_alerts({k: interpolate(str(v), turned_on) for k, v in env.items()})
        assert AlertSettings.from_env(on) == AlertSettings(
            email_to=("ops@example.com",),
            smtp_conn_id="auditsync_smtp",
            webhook_conn_id="auditsync_alert_webhook",
        )
        assert json.loads(on["AIRFLOW_CONN_AUDITSYNC_SMTP"]) == {
            "conn_type": "smtp",
            "host": "mail.example",
            "port": 587,
            "login": "mailer",
            "password": "pw",
            "extra": {"disable_ssl": True, "disable_tls": False},
        }
        assert json.loads(on["AIRFLOW_CONN_AUDITSYNC_ALERT_WEBHOOK"]) == {
            "conn_type": "http",
            "host": hook,
        }
        assert on["AUDITSYNC_VERIFY_DEADLINE_S"] == "3600"
    readme = (ROOT / "docs" / "operations.md").read_text()
    table = readme[readme.index("### Pipeline and DAG settings") :]
    assert [k for k in ALERT_SETTINGS if f"| `{k}` |" not in table] == []


def test_the_alerts_start_runs_the_command_with_the_connections():
    """``airflow_env --alerts CMD``, as the compose services start: CMD gets its own
    environment plus the channels' connections; a bad setting stops it, named."""
    show = "import json, os; print(json.dumps({k: os.environ.get(k) for k in KEYS}))"
    keys = ["AUDITSYNC_ALERT_WEBHOOK_CONN", "AIRFLOW_CONN_AUDITSYNC_SMTP", "OTHER"]
    start = [sys.executable, "-m", "watch_service.tools.airflow_env", "--alerts", sys.executable]
    base = {"PATH": "/usr/bin:/bin", "OTHER": "kept", "AUDITSYNC_ALERT_SMTP": ""}
    env = {**base, "AUDITSYNC_ALERT_WEBHOOK": "https://hooks.example/x"}
    out = subprocess.run(
        [*start, "-c", show.replace("KEYS", repr(keys))],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stderr) == (0, "")
    assert json.loads(out.stdout) == {
        "AUDITSYNC_ALERT_WEBHOOK_CONN": "auditsync_alert_webhook",
        "AIRFLOW_CONN_AUDITSYNC_SMTP": None,
        "OTHER": "kept",
    }
    bad = subprocess.run(
        [*start, "-c", "print('ran')"],
        env={**base, "AUDITSYNC_ALERT_SMTP": "http://mail:25"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == (
        "auditsync airflow-env: AUDITSYNC_ALERT_SMTP: expected smtp://, smtp+starttls:// or "
        "smtps://, got 'http://mail:25'\n"
    )


def _walk_env(services):
    for name, svc in services.items():
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        for key, value in env.items():
            yield name, key, str(value)


def test_no_secret_is_written_in_the_file(services):
    for name, key, value in _walk_env(services):
        if SECRET_NAME.search(key):
            # Required (no default) or explicitly empty (dev mode, e.g. no bearer keys).
            assert REQUIRED_VAR.match(value) or re.fullmatch(r"\$\{[A-Z_]+:-\}", value), (
                f"{name}: {key} must come from the environment, got {value!r}"
            )
        for user_pass in re.findall(r"://[^/@\s:]+:([^@\s]+)@", value):
            assert REQUIRED_VAR.match(user_pass), f"{name}: {key} embeds a password"
        for pw in re.findall(r'"password":\s*"([^"]*)"', value):
            assert REQUIRED_VAR.match(pw), f"{name}: {key} embeds a password"


def locked_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    [version] = [p["version"] for p in lock["package"] if p["name"] == package]
    return version


def test_one_image_on_the_official_airflow_image_of_the_locked_versions(services):
    """apache/airflow of uv.lock's Airflow and of the Python `make setup` uses (one the lock
    resolves for), plus the wheel and the lock's pins of its extras."""
    inline = services["watch"]["build"]["dockerfile_inline"]
    froms = re.findall(r"^FROM (\S+)", inline, re.MULTILINE)
    assert froms == ["python:3.11-slim-bookworm", "apache/airflow:3.3.2-python3.11"]
    assert locked_version("apache-airflow") == "3.3.2"
    image_python = froms[1].rpartition("-python")[2]
    makefile = (ROOT / "Makefile").read_text()
    assert f"--python python{image_python}" in makefile
    environments = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]
    assert f"python_version >= '{image_python}'" in environments["environments"][0]
    assert "uv build --wheel" in inline
    assert "uv export --frozen --no-dev --no-emit-project" in inline
    assert "--extra airflow --extra pipeline" in inline
    assert "pip install --no-cache-dir --no-deps /tmp/dist/auditsync-*.whl" in inline
    assert "libpostgresql-jdbc-java" in inline and "openjdk-17-jre-headless" in inline
    for name, svc in services.items():
        if not svc.get("image", "").startswith("postgres:"):
            assert svc["image"] == "auditsync:dev", name


def test_every_long_running_service_has_a_healthcheck(services):
    """Every service that stays up reports its health; the Airflow jobs through Airflow's own
    `jobs check` of this host's job."""
    one_shot = {"migrate", "airflow-init"}
    for name, svc in services.items():
        if name not in one_shot:
            assert svc.get("healthcheck", {}).get("test"), name
    for name, job in (
        ("airflow-scheduler", "SchedulerJob"),
        ("airflow-dag-processor", "DagProcessorJob"),
        ("airflow-triggerer", "TriggererJob"),
    ):
        test = services[name]["healthcheck"]["test"]
        assert test == ["CMD", "airflow", "jobs", "check", "--job-type", job, "--local"], name
    assert "/api/v2/monitor/health" in " ".join(
        services["airflow-api-server"]["healthcheck"]["test"]
    )
    assert "/readyz" in " ".join(services["watch"]["healthcheck"]["test"])
    assert "--metrics-port 9464" in command(services["sink"])


def test_only_airflow_commands_go_through_the_images_entrypoint(services):
    """The official image's entrypoint runs `airflow …` (and `python …`): every other command
    starts under dumb-init alone; the DAGs come from the installed package."""
    for name, svc in services.items():
        if svc.get("image", "").startswith("postgres:"):
            continue
        first = command(svc).split()[0]
        if first in ("airflow", "python"):
            assert "entrypoint" not in svc, name
        else:
            assert svc["entrypoint"] == ["/usr/bin/dumb-init", "--"], name
    for name in AIRFLOW_SERVICES:
        dags = services[name]["environment"]["AIRFLOW__CORE__DAGS_FOLDER"]
        assert dags.endswith("/site-packages/auditsync_plugin/dags"), name


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR:-default}`` and ``${VAR:+replacement}`` forms, for the checks below."""

    def one(m: re.Match) -> str:
        name, op, word = m.group(1), m.group(2), m.group(3)
        present = bool(env.get(name))
        if op == ":-":
            return env[name] if present else word
        return word if present else ""

    return re.sub(r"\$\{([A-Z_]+)(:-|:\+)([^}]*)\}", one, value)


@pytest.mark.parametrize("host_path", ["./keys.toml", ""])
def test_the_keys_file_it_names_is_mounted(services, host_path):
    """With AUDITSYNC_KEYS_FILE set in .env (a host path), the watch service is told a path
    inside the container that a read-only volume fills from that host file; unset, no keys
    file is named (dev mode)."""
    env = {"AUDITSYNC_KEYS_FILE": host_path}
    watch = services["watch"]
    named = interpolate(watch["environment"]["AUDITSYNC_KEYS_FILE"], env)
    mounts = [interpolate(v, env) for v in watch.get("volumes", [])]
    if not host_path:
        assert named == ""
        return
    assert f"{host_path}:{named}:ro" in mounts
