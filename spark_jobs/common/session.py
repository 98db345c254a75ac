"""Building the SparkSession, and finding the PostgreSQL JDBC driver for it.

JDBC driver discovery, first hit wins:
1. ``AUDITSYNC_JDBC_JAR`` — a path to the driver jar;
2. ``/usr/share/java/postgresql.jar`` — Debian's ``libpostgresql-jdbc-java``;
3. ``spark.jars.packages=org.postgresql:postgresql:42.7.4`` — only when
   ``AUDITSYNC_SPARK_MAVEN=1`` says Maven Central is reachable from here.
Otherwise ``JdbcDriverMissing`` says how to get one. This is the only place that looks the
driver up: the runner, the DAG, the Spark Connect server and the tests all ask here. Importing
this module does not import pyspark (the runner and the DAG only need the flags).

``stop_session`` ends the session of a process that is done with Spark (a job's ``main``, the
runner, the tests' shared session): it also closes the py4j gateway of a JVM this process
started, while logging still has its handlers (see its docstring). Code that runs in a process
that may start Spark again (the GX operator in an Airflow worker) calls ``SparkSession.stop``.

One builder for every session: a job's own JVM (``spark-submit`` or ``master``), or a client
of a long-running Spark Connect server (``remote="sc://host:port"``), which already carries the
driver on its classpath and keeps its static settings; only session settings travel then.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from watch_service.protocol.errors import AuditsyncError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAR_ENV = "AUDITSYNC_JDBC_JAR"
MAVEN_ENV = "AUDITSYNC_SPARK_MAVEN"
DEBIAN_JAR = Path("/usr/share/java/postgresql.jar")
MAVEN_PACKAGE = "org.postgresql:postgresql:42.7.4"

# Semantics, not tuning: dates in the audit log's partitions are UTC days.
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}


class JdbcDriverMissing(AuditsyncError):
    """No PostgreSQL JDBC driver could be found; the message says how to get one."""


def jdbc_driver(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``("jar", path)`` or ``("package", maven_coordinates)`` for the PostgreSQL driver."""
    env = os.environ if environ is None else environ
    explicit = env.get(JAR_ENV, "").strip()
    if explicit:
        if not Path(explicit).is_file():
            raise JdbcDriverMissing(f"{JAR_ENV}={explicit!r}: no such file")
        return "jar", explicit
    if DEBIAN_JAR.is_file():
        return "jar", str(DEBIAN_JAR)
    if env.get(MAVEN_ENV, "") == "1":
        return "package", MAVEN_PACKAGE
    raise JdbcDriverMissing(
        "no PostgreSQL JDBC driver found: install it with `apt-get install "
        f"libpostgresql-jdbc-java` (gives {DEBIAN_JAR}), or set {JAR_ENV} to a postgresql "
        f"jar, or set {MAVEN_ENV}=1 to fetch {MAVEN_PACKAGE} from Maven Central"
    )


def jdbc_conf(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    kind, where = jdbc_driver(environ)
    return {"spark.jars": where} if kind == "jar" else {"spark.jars.packages": where}


def submit_flags(environ: Mapping[str, str] | None = None) -> list[str]:
    """``spark-submit`` flags that put the driver on the classpath."""
    kind, where = jdbc_driver(environ)
    return ["--jars", where] if kind == "jar" else ["--packages", where]


def submit_options(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The same, as Airflow's ``SparkSubmitOperator`` keywords (``jars`` or ``packages``)."""
    kind, where = jdbc_driver(environ)
    return {"jars": where} if kind == "jar" else {"packages": where}


def build_session(
    app_name: str,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
) -> SparkSession:
    """The session for a job. ``master`` only outside ``spark-submit`` (which sets its own);
    ``remote`` (``sc://host:port``) makes it a Spark Connect client instead; ``conf`` adds or
    overrides settings (tests: shuffle partitions, UI off)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
        settings = {**BASE_CONF, **(conf or {})}
    else:
        if master:
            builder = builder.master(master)
        settings = {**BASE_CONF, **jdbc_conf(), **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def stop_session(spark: SparkSession) -> None:
    """Stop ``spark``; for a local JVM this process launched, also close the py4j gateway and
    let the JVM exit now, and stop py4j's logger from reaching the root handlers.

    ``SparkSession.stop`` keeps the gateway for a next session, so its connections used to be
    closed by py4j's finalisers at interpreter exit, each logging "Closing down clientserver
    connection" to handlers whose streams were already closed by then (pytest's capture, a
    redirected stdout): ``--- Logging error --- ValueError: I/O operation on closed file``
    after a green run. Those finalisers still run at exit, so py4j's messages stop at its
    own logger from here on. A later ``build_session`` launches a fresh gateway."""
    spark.stop()
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:  # Spark Connect, or a gateway already closed
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)  # pyspark's launched JVM: it exits when stdin closes
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()
        proc.wait(timeout=30)
    SparkContext._gateway = None
    SparkContext._jvm = None
    py4j = logging.getLogger("py4j")
    py4j.propagate = False
    if not py4j.handlers:
        py4j.addHandler(logging.NullHandler())
