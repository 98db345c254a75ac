"""The environment Airflow runs in for this project, computed in one place.

Airflow is configured by environment variables only (``AIRFLOW__SECTION__KEY``,
``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*``), so ``make airflow``, the tests and a deployment all get
the same answer from :func:`airflow_env`: a pure function of the project's :class:`Settings` and
a few ``AUDITSYNC_*`` overrides passed in explicitly (it never reads ``os.environ`` itself).

``python -m watch_service.tools.airflow_env`` prints the variables as shell ``export`` lines,
``… --ui-url`` where the UI is;
``python -m watch_service.tools.airflow_env CMD ARGS…`` runs CMD with them (e.g. ``airflow
standalone``); ``… --alerts CMD ARGS…`` runs CMD in its own environment plus only the alert
channels' connections (:func:`with_alerts`: docker-compose.yml's Airflow services, configured
by their own environment, turn alerts on with the same settings as a local Airflow). When it
runs CMD with every variable, a Spark Connect server started by ``auditsync spark-connect
start`` is picked up as the ``spark_connect_default`` connection unless
``AUDITSYNC_SPARK_CONNECT`` says otherwise. One setting, ``AUDITSYNC_AIRFLOW_PORT``, moves
Airflow: the API server's port, its base URL and the execution API URL the task runner calls
are derived together (:func:`api_server_env`).

The JDBC driver is not decided here: the Spark steps find it themselves
(``spark_jobs.common.session.jdbc_driver``), honouring a user's ``AUDITSYNC_JDBC_JAR``.
Nor is Airflow's metadata database: its own ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` passes
through unchanged (unset: SQLite in ``AIRFLOW_HOME``, for one machine); where the workers and
the API server run apart, point it at a PostgreSQL database
(``postgresql+psycopg2://…``, the driver the postgres provider brings).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from watch_service.settings import PROJECT_ROOT, Settings, SettingsError
from watch_service.store.database import database_url

DEFAULT_SPARK_MASTER = "local[*]"
DEFAULT_USERS = "admin:admin"
DEFAULT_SCHEDULE = "*/15 * * * *"
DEFAULT_AIRFLOW_HOST = "127.0.0.1"
DEFAULT_AIRFLOW_PORT = 8080
# What a task of the pipeline's DAGs imports: the task runner, the operators its DAG file
# builds, the Spark Connect client, pyiceberg and Great Expectations its steps use. The
# scheduler's LocalExecutor workers come from a fork server that imports these once
# (``[scheduler] mp_start_method`` forkserver, ``[core] mp_forkserver_preload``; the other
# components keep fork and preload nothing), and each task process is forked from a worker, so
# no task imports them again. The fork server skips a module that cannot be imported (an extra
# not installed).
TASK_PRELOAD = (
    "airflow.executors.local_executor",
    "airflow.sdk.execution_time.supervisor",
    "airflow.sdk.execution_time.task_runner",
    "airflow.providers.apache.spark.operators.spark_submit",
    "auditsync_plugin.operators.spark_step",
    "auditsync_plugin.operators.pipeline",
    "auditsync_plugin.operators.run_lifecycle",
    "auditsync_plugin.operators.landing_retention",
    "auditsync_plugin.sensors.sink_cursors",
    "auditsync_plugin.notifications.notifiers",
    "pyspark.sql.connect.session",
    "spark_jobs.common.session",
    "pyiceberg.catalog.sql",
    "great_expectations",
)

# Overrides this module honours (all optional), with what they set.
OVERRIDES = {
    "AUDITSYNC_SPARK_MASTER": "spark_default connection host (local[*], spark://host:7077, …)",
    "AUDITSYNC_WATCH_URL": "auditsync_watch connection (default http://<AUDITSYNC_HOST>:<PORT>)",
    "AUDITSYNC_SINK_KEY": "bearer key the sensor presents to the watch service",
    "AUDITSYNC_LANDING": "landing zone root: a path, file://… or s3://bucket/prefix "
    "(default <AUDITSYNC_HOME>/landing)",
    "AUDITSYNC_AWS_CONN_ID": "the Airflow aws connection an s3:// landing is read with "
    "(unset: the AWS_* variables)",
    "AUDITSYNC_WAREHOUSE": "pipeline outputs root (default <AUDITSYNC_HOME>/warehouse)",
    "AUDITSYNC_GX_ROOT": "Great Expectations validation results and Data Docs: a path, file://… "
    "or s3://bucket/prefix (default <AUDITSYNC_HOME>/gx)",
    "AUDITSYNC_CONSUMERS": "comma-separated sink consumers to wait for (default: all found)",
    "AUDITSYNC_SCHEDULE": f"audit_sync cron schedule (default {DEFAULT_SCHEDULE!r})",
    "AUDITSYNC_AIRFLOW_USERS": f"simple auth manager users (default {DEFAULT_USERS!r})",
    "AUDITSYNC_SENSOR_TIMEOUT_S": "how long the sink-cursor sensor waits before failing",
    "AUDITSYNC_SPARK_CONNECT": "spark_connect_default connection (sc://host:port); unset: "
    "every Spark step is a spark-submit through spark_default",
    "AUDITSYNC_JDBC_JAR": "the PostgreSQL JDBC driver jar, passed through unchanged",
    "AUDITSYNC_SPARK_WORKER_JARS": "absolute folder where every Spark worker holds the pinned "
    "jars: a spark-submit's executors load them from there instead of fetching 660 MB each",
    "AUDITSYNC_AIRFLOW_HOST": f"Airflow API server address (default {DEFAULT_AIRFLOW_HOST})",
    "AUDITSYNC_AIRFLOW_PORT": f"Airflow API server port (default {DEFAULT_AIRFLOW_PORT}); the "
    "UI, the execution API the task runner calls and the links in alerts all follow it",
    # Airflow's own name for the port: honoured as the same setting, so that setting it alone
    # cannot leave the task runner calling the execution API on another port.
    "AIRFLOW__API__PORT": "same as AUDITSYNC_AIRFLOW_PORT (AUDITSYNC_AIRFLOW_PORT wins)",
    "AUDITSYNC_ALERT_EMAIL": "alert e-mail recipients (comma-separated); unset: no e-mail",
    "AUDITSYNC_ALERT_FROM": "alert e-mail sender (default auditsync@localhost)",
    "AUDITSYNC_ALERT_SMTP": "SMTP server for alerts: smtp://[user:password@]host:port (plain), "
    "smtp+starttls://…, smtps://… (the auditsync_smtp connection)",
    "AUDITSYNC_ALERT_SMTP_CONN": "an SMTP connection id of your own (default smtp_default)",
    "AUDITSYNC_ALERT_WEBHOOK": "Slack / Teams incoming-webhook URL for alerts; unset: none",
    "AUDITSYNC_VERIFY_DEADLINE_S": "alert when a data interval is not verified this long after "
    "it ended (default 3 x the schedule)",
    "AUDITSYNC_RETRY_DELAY_S": "seconds before a step's first retry after a transient fault "
    "(default 30; each later retry waits twice as long, at most 600)",
}
SMTP_CONN_ID = "auditsync_smtp"
WEBHOOK_CONN_ID = "auditsync_alert_webhook"
PASSED_THROUGH = (
    "AUDITSYNC_AWS_CONN_ID",
    "AUDITSYNC_SCHEDULE",
    "AUDITSYNC_SENSOR_TIMEOUT_S",
    "AUDITSYNC_JDBC_JAR",
    "AUDITSYNC_SPARK_WORKER_JARS",
    "AUDITSYNC_ALERT_EMAIL",
    "AUDITSYNC_ALERT_FROM",
    "AUDITSYNC_ALERT_SMTP_CONN",
    "AUDITSYNC_VERIFY_DEADLINE_S",
    "AUDITSYNC_RETRY_DELAY_S",
)


def connection_json(url: str, conn_type: str, **extra: str) -> str:
    """An Airflow connection as the JSON ``AIRFLOW_CONN_*`` accepts, from a URL."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        raise SettingsError(f"{conn_type} connection: expected scheme://host[:port]/…, got {url!r}")
    doc: dict[str, object] = {"conn_type": conn_type, "host": parts.hostname}
    if parts.port:
        doc["port"] = parts.port
    if parts.username:
        doc["login"] = unquote(parts.username)
    if parts.password:
        doc["password"] = unquote(parts.password)
    if conn_type == "http":
        doc["schema"] = parts.scheme
    elif parts.path.strip("/"):
        doc["schema"] = parts.path.strip("/")
    if extra:
        doc["extra"] = extra
    return json.dumps(doc, sort_keys=True)


def smtp_connection_json(url: str) -> str:
    """The SMTP provider's connection for ``smtp://`` (plain), ``smtp+starttls://`` or
    ``smtps://`` (TLS from the start) URLs."""
    scheme = urlsplit(url).scheme
    modes = {"smtp": (True, True), "smtp+starttls": (True, False), "smtps": (False, True)}
    if scheme not in modes:
        raise SettingsError(
            f"AUDITSYNC_ALERT_SMTP: expected smtp://, smtp+starttls:// or smtps://, got {url!r}"
        )
    doc = json.loads(connection_json(url, "smtp"))
    disable_ssl, disable_tls = modes[scheme]
    doc["extra"] = {"disable_ssl": disable_ssl, "disable_tls": disable_tls}
    return json.dumps(doc, sort_keys=True)


def alert_env(over: Mapping[str, str]) -> dict[str, str]:
    """The alert channels' connections, from ``AUDITSYNC_ALERT_SMTP`` / ``…_WEBHOOK``."""
    env = {}
    if "AUDITSYNC_ALERT_SMTP" in over:
        env["AIRFLOW_CONN_AUDITSYNC_SMTP"] = smtp_connection_json(over["AUDITSYNC_ALERT_SMTP"])
        env["AUDITSYNC_ALERT_SMTP_CONN"] = SMTP_CONN_ID
    if "AUDITSYNC_ALERT_WEBHOOK" in over:
        url = over["AUDITSYNC_ALERT_WEBHOOK"]
        if not urlsplit(url).scheme.startswith("http") or not urlsplit(url).hostname:
            raise SettingsError(f"AUDITSYNC_ALERT_WEBHOOK: expected an http(s) URL, got {url!r}")
        # The whole URL is the connection's host: an incoming webhook's path is its credential.
        env["AIRFLOW_CONN_AUDITSYNC_ALERT_WEBHOOK"] = json.dumps(
            {"conn_type": "http", "host": url}, sort_keys=True
        )
        env["AUDITSYNC_ALERT_WEBHOOK_CONN"] = WEBHOOK_CONN_ID
    return env


def with_alerts(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` plus the alert channels' connections its ``AUDITSYNC_ALERT_*`` settings
    name (an empty value is unset, as compose passes an unset variable)."""
    return {**environ, **alert_env({k: v for k, v in environ.items() if v != ""})}


def api_server_env(host: str, port: int) -> dict[str, str]:
    """Where Airflow's API server listens, and every setting that must agree with it: the UI's
    base URL (links in alerts, the login redirect) and the execution API the task runner calls
    (``AIRFLOW__CORE__EXECUTION_API_SERVER_URL``, by default ``http://localhost:8080/…``)."""
    if not 0 < port < 65536:
        raise SettingsError(f"AUDITSYNC_AIRFLOW_PORT: expected 1-65535, got {port}")
    # A wildcard bind address is no address to call: clients use loopback then.
    reach = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in reach:
        reach = f"[{reach}]"
    base = f"http://{reach}:{port}"
    return {
        "AIRFLOW__API__HOST": host,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
    }


def _port(over: Mapping[str, str]) -> int:
    name = next(
        (n for n in ("AUDITSYNC_AIRFLOW_PORT", "AIRFLOW__API__PORT") if n in over),
        "AUDITSYNC_AIRFLOW_PORT",
    )
    raw = over.get(name, str(DEFAULT_AIRFLOW_PORT))
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a port number, got {raw!r}") from None


def airflow_env(
    settings: Settings,
    overrides: Mapping[str, str] | None = None,
    *,
    project_root: Path = PROJECT_ROOT,
    python: str = sys.executable,
) -> dict[str, str]:
    """Every variable Airflow (and the Spark jobs it submits) needs for this project."""
    over = {k: v for k, v in (overrides or {}).items() if k in OVERRIDES and v != ""}
    local = Path(settings.local_dir)
    home = local / "airflow"
    bin_dir = Path(python).parent
    watch_url = over.get("AUDITSYNC_WATCH_URL", f"http://{settings.host}:{settings.port}")
    watch_conn = json.loads(connection_json(watch_url, "http"))
    if "AUDITSYNC_SINK_KEY" in over:
        watch_conn["password"] = over["AUDITSYNC_SINK_KEY"]
    spark_conn = {
        "conn_type": "spark",
        "host": over.get("AUDITSYNC_SPARK_MASTER", DEFAULT_SPARK_MASTER),
    }
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(project_root / "dags"),
        # The plugin registers through the installed package's `airflow.plugins` entry point
        # (an editable install in a checkout): Airflow's plugins folder holds nothing of ours,
        # since it imports every .py file below it as a top-level module of the file's name.
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
        "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD": ",".join(TASK_PRELOAD),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": over.get(
            "AUDITSYNC_AIRFLOW_USERS", DEFAULT_USERS
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # A worker's calls to the Execution API time out after 5 s by default; on a loaded
        # two-core machine a task's start call took longer, and the try failed before it ran.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_conn, sort_keys=True),
        "AIRFLOW_CONN_AUDITSYNC_WATCH": json.dumps(watch_conn, sort_keys=True),
        "AIRFLOW_CONN_AUDITSYNC_PG": connection_json(database_url(settings), "postgres"),
        "AIRFLOW_VAR_AUDITSYNC_LANDING": over.get("AUDITSYNC_LANDING", str(local / "landing")),
        "AIRFLOW_VAR_AUDITSYNC_WAREHOUSE": over.get(
            "AUDITSYNC_WAREHOUSE", str(local / "warehouse")
        ),
        "AIRFLOW_VAR_AUDITSYNC_GX_ROOT": over.get("AUDITSYNC_GX_ROOT", str(local / "gx")),
        "AIRFLOW_VAR_AUDITSYNC_CONSUMERS": over.get("AUDITSYNC_CONSUMERS", ""),
        "AUDITSYNC_SPARK_SUBMIT": str(bin_dir / "spark-submit"),
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        **api_server_env(over.get("AUDITSYNC_AIRFLOW_HOST", DEFAULT_AIRFLOW_HOST), _port(over)),
    }
    if "AUDITSYNC_SPARK_CONNECT" in over:
        env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = connection_json(
            over["AUDITSYNC_SPARK_CONNECT"], "spark_connect"
        )
    for name in PASSED_THROUGH:
        if name in over:
            env[name] = over[name]
    env.update(alert_env(over))
    return env


def main(argv: list[str] | None = None) -> int:
    from watch_service import settings as settings_mod
    from watch_service.tools.spark_connect import running_url

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--alerts"] and len(argv) > 1:
        try:
            env = with_alerts(os.environ)
        except SettingsError as exc:
            print(f"auditsync airflow-env: {exc}", file=sys.stderr)
            return 2
        os.execvpe(argv[1], argv[1:], env)
    try:
        settings = settings_mod.load()
        overrides = dict(os.environ)
        if "AUDITSYNC_SPARK_CONNECT" not in overrides:
            overrides["AUDITSYNC_SPARK_CONNECT"] = running_url(settings) or ""
        env = airflow_env(settings, overrides)
    except SettingsError as exc:
        print(f"auditsync airflow-env: {exc}", file=sys.stderr)
        return 2
    if not argv:
        print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))
        return 0
    if argv == ["--ui-url"]:
        print(f"{env['AIRFLOW__API__BASE_URL']}/")
        return 0
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    bin_dir = str(Path(sys.executable).parent)
    merged = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    os.execvpe(argv[0], argv, merged)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
