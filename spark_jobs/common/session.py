"""Building the SparkSession, with the jars every pipeline JVM carries.

The classpath is the pinned jars ``make setup`` fetched (``spark_jobs.common.jars``): Iceberg's
Spark runtime, ``hadoop-aws`` with its AWS SDK bundle, and the PostgreSQL JDBC driver
(``AUDITSYNC_JDBC_JAR`` may name another driver jar). Nothing is fetched at run time: a missing
jar is ``JarsMissing``, which says to run ``make setup``. This is the only place that builds
the classpath: the runner, the DAG, the Spark Connect server and the tests all ask here.
Importing this module does not import pyspark (the runner and the DAG only need the flags).

``stop_session`` ends the session of a process that is done with Spark (a job's ``main``, the
runner, the tests' shared session): it also closes the py4j gateway of a JVM this process
started, while logging still has its handlers (see its docstring). Code that runs in a process
that may start Spark again (the GX operator in an Airflow worker) calls ``SparkSession.stop``.

One builder for every session: a job's own JVM (``spark-submit`` or ``master``), or a client
of a long-running Spark Connect server (``remote="sc://host:port"``), which already carries the
jars and Iceberg's SQL extensions and keeps its static settings; only session settings travel
then (the warehouse's catalog is attached per session: ``spark_jobs.warehouse.tables.attach``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from spark_jobs.common import jars, jvm_archive
from spark_jobs.common.jars import JarsMissing
from spark_jobs.common.jvm_archive import ARCHIVE_OPTIONS
from watch_service.protocol.errors import AuditsyncError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAR_ENV = "AUDITSYNC_JDBC_JAR"
WORKER_JARS_ENV = "AUDITSYNC_SPARK_WORKER_JARS"
# Set by spark-submit for the Python application it runs (the JVM is already up).
SUBMIT_GATEWAY_ENV = "PYSPARK_GATEWAY_PORT"
# Set by the DAG's spark-submit steps: the jars are on the submit's command line.
JARS_PLACED_ENV = "AUDITSYNC_SPARK_JARS_PLACED"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

# Dates in the audit log's partitions are UTC days (semantics). Adaptive execution may size a
# cached DataFrame's partitions too: by default Spark keeps a cached plan's 200 shuffle
# partitions (``spark.sql.shuffle.partitions``) whatever it holds, and the steps cache what a
# run brought, so a run of 2,000 new records paid for 200-task stages that did almost nothing
# (bench/pipeline.py: backfill 13.6 s, with this 2.8 s). AQE coalesces them to what the data
# needs, so a run's cost follows its records; a large run still gets its partitions.
#
# Every SQL execution (and every re-plan adaptive execution makes) renders its physical plan
# for the status store, UI or not; Spark's default ``formatted`` mode details each node, which
# for reconcile's plans was about 5 % of a cold run's driver samples (JFR). ``simple`` is one line
# a node.
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    "spark.sql.ui.explainMode": "simple",
}
# Static settings a JVM must start with (a Spark Connect server too). A long-lived JVM (the
# Spark Connect server, the runner's session) keeps the status of its last SQL executions, jobs
# and stages for the UI even with the UI off; with Spark's defaults (1,000 of each, with every
# plan's metrics) they were a large part of a full heap after 30 runs. A run makes about 30.
STATIC_CONF = {
    "spark.sql.extensions": EXTENSIONS,
    "spark.sql.ui.retainedExecutions": "100",
    "spark.ui.retainedJobs": "200",
    "spark.ui.retainedStages": "200",
    "spark.ui.retainedTasks": "20000",
}

# What a JVM started for one run or one step (the runner's session, a DAG step's spark-submit)
# runs with on a local master, where the driver's JVM is the executor too: C1-only JIT (a
# short JVM's time goes to compiling, not running, the small plans a run makes by the dozen),
# the serial collector (a heap of a few GB, no collector threads competing for the cores; the
# tests' JVMs measured both, tests/support.py) and one shuffle partition per core (Spark's
# 200 made each small shuffle 200 tasks, or 200 files per map task; adaptive execution still
# coalesces below that). A long-lived JVM (the Spark Connect server, ``long_lived``) keeps the
# tiered JIT: its compiled code serves every later run. Measured with bench/pipeline.py (README,
# "Performance"). A ``--conf`` of the same key wins.
SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_conf(master: str | None, long_lived: bool = False) -> dict[str, str]:
    """The settings above for ``master`` (none for a cluster master, or when not known)."""
    cores = local_cores(master)
    if cores is None:
        return {}
    conf = {"spark.sql.shuffle.partitions": str(cores)}
    if not long_lived:
        conf["spark.driver.extraJavaOptions"] = SHORT_JVM_OPTIONS
    return conf


def local_cores(master: str | None) -> int | None:
    """The cores of a local master (``local``: 1, ``local[N]`` / ``local[N,F]``: N, ``local[*]``:
    this machine's), or None for any other master."""
    if not is_local(master):
        return None
    assert master is not None
    inside = master[len("local[") : -1].split(",")[0].strip() if master != "local" else "1"
    if inside == "*":
        return os.cpu_count() or 1
    return int(inside) if inside.isdigit() and int(inside) > 0 else 1


# Kept for the callers that report a missing driver: every pinned jar is reported alike now.
JdbcDriverMissing = JarsMissing


def classpath(environ: Mapping[str, str] | None = None) -> list[str]:
    """The jars of every pipeline JVM, as paths (``JarsMissing`` when one was not fetched)."""
    env = os.environ if environ is None else environ
    explicit = env.get(JAR_ENV, "").strip()
    if explicit and not Path(explicit).is_file():
        raise JarsMissing(f"{JAR_ENV}={explicit!r}: no such file")
    paths = []
    for jar in jars.SPARK_JARS:
        if jar is jars.POSTGRESQL and explicit:
            paths.append(explicit)
        else:
            paths.append(str(jars.path_of(jar, env)))
    return paths


def is_local(master: str | None) -> bool:
    """A ``local`` or ``local[…]`` master: the executors run in the driver's JVM."""
    return master is not None and (master == "local" or master.startswith("local["))


def jvm_conf(environ: Mapping[str, str] | None = None, master: str | None = None) -> dict[str, str]:
    """``submit_options`` as the settings of a JVM this process launches (``build_session``
    outside spark-submit): one rule for where the jars go, whoever starts the JVM."""
    options = submit_options(environ, master)
    conf = dict(options["conf"])
    if options["driver_class_path"]:
        conf["spark.driver.extraClassPath"] = options["driver_class_path"]
    if options["jars"]:
        conf["spark.jars"] = options["jars"]
    return conf


def submit_flags(
    environ: Mapping[str, str] | None = None, master: str | None = None, long_lived: bool = False
) -> list[str]:
    """``spark-submit`` flags that put the jars where ``master``'s executors load them and load
    the extensions: ``submit_options`` as a command line (the Spark Connect server, the tests'
    sessions)."""
    options = submit_options(environ, master, long_lived)
    flags = []
    if options["driver_class_path"]:
        flags += ["--driver-class-path", options["driver_class_path"]]
    if options["jars"]:
        flags += ["--jars", options["jars"]]
    for key, value in options["conf"].items():
        flags += ["--conf", f"{key}={value}"]
    return flags


class SubmitOptions(TypedDict):
    jars: str | None
    driver_class_path: str | None
    conf: dict[str, str]


def worker_jars(environ: Mapping[str, str] | None = None) -> str | None:
    """``AUDITSYNC_SPARK_WORKER_JARS``: the folder where every Spark worker holds the pinned jars
    (the compose image's ``/opt/auditsync/.local/jars``), or None when the workers have none."""
    env = os.environ if environ is None else environ
    folder = env.get(WORKER_JARS_ENV, "").strip()
    if not folder:
        return None
    if not folder.startswith("/"):
        from watch_service.settings import SettingsError

        raise SettingsError(
            f"{WORKER_JARS_ENV}={folder!r}: an absolute path on the Spark workers is expected"
        )
    return folder.rstrip("/") or "/"


def submit_options(
    environ: Mapping[str, str] | None = None, master: str | None = None, long_lived: bool = False
) -> SubmitOptions:
    """Where the jars go for ``master`` (None: not known yet), as Airflow's
    ``SparkSubmitOperator`` keywords; ``submit_flags`` gives them as a command line.

    They are sent with an application (``--jars``) only when its executors have no copy of their
    own: each executor of each application fetches all 660 MB from the driver (about 5 s on a
    loaded two-core machine, for each Spark step of each run). A local master's executors run in
    the driver's JVM, so the jars go on its class path (as ``--jars`` each JVM also copied them
    into a ``userFiles`` folder of its own, about 2 s of a session's start, left behind when
    killed). With ``AUDITSYNC_SPARK_WORKER_JARS`` the executors load them from that folder on
    their worker (and an ``AUDITSYNC_JDBC_JAR`` from its own path there). A local master's JVM
    also gets ``local_conf`` (``long_lived``: a Spark Connect server). A driver whose class path
    the jars lead (a local master, or workers that hold them) maps the class archive ``make
    setup`` built for it (``jvm_archive.options``), when there is one."""
    paths = classpath(environ)
    conf = {**STATIC_CONF, **local_conf(master, long_lived)}
    folder = None if is_local(master) else worker_jars(environ)
    if folder is None and not is_local(master):
        return {"jars": ",".join(paths), "driver_class_path": None, "conf": conf}
    # The pinned jars lead the driver's class path: the class archive for it, when built.
    archive = jvm_archive.options(paths, environ)
    if archive:
        conf[ARCHIVE_OPTIONS] = archive
    if folder is None:
        return {"jars": None, "driver_class_path": os.pathsep.join(paths), "conf": conf}
    # An AUDITSYNC_JDBC_JAR is taken to be at the same path on the workers (one image).
    pinned = {str(jars.jars_dir(environ) / jar.file_name) for jar in jars.SPARK_JARS}
    explicit = set(paths) - pinned
    on_workers = [p if p in explicit else f"{folder}/{Path(p).name}" for p in paths]
    conf["spark.executor.extraClassPath"] = ":".join(on_workers)
    return {"jars": None, "driver_class_path": os.pathsep.join(paths), "conf": conf}


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
        # A spark-submit that placed the jars (``submit_options``, as the DAG's steps do) runs
        # this process in a JVM that already has them where its master's executors load them:
        # naming them again (``spark.jars``) would send every executor a copy. A spark-submit
        # by hand, without the flags, still gets them here.
        placed = SUBMIT_GATEWAY_ENV in os.environ and os.environ.get(JARS_PLACED_ENV) == "1"
        settings = {**BASE_CONF, **({} if placed else jvm_conf(master=master)), **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if remote:
        connect: Any = spark  # a Spark Connect session: its ``client`` is not the classic one's
        connect.client.set_retry_policies([connect_retry_policy()])
    else:
        check_worker_jars(spark)
    return spark


class WorkerJarsMissing(AuditsyncError):
    """An executor cannot load a pinned jar from the folder ``AUDITSYNC_SPARK_WORKER_JARS``
    names on its worker."""


def check_worker_jars(spark: SparkSession, environ: Mapping[str, str] | None = None) -> None:
    """When a cluster's executors load the pinned jars from their workers' disks
    (``AUDITSYNC_SPARK_WORKER_JARS``, on ``spark.executor.extraClassPath``), ask them before the
    step's work whether they can: a worker without them would otherwise fail the step's first
    Iceberg or JDBC task with a ClassNotFoundException far from the setting that caused it.
    One task per core loads each jar's ``probe`` class (``try_reflect``: NULL where it is
    missing) and names its executor's host, gathered per host; ``WorkerJarsMissing`` says which
    jars which executors lack, and a line says which hosts passed. A local master, or jars sent
    with the application, skip it."""
    folder = worker_jars(environ)
    conf = spark.sparkContext.getConf()
    extra = conf.get("spark.executor.extraClassPath", "") or ""
    if folder is None or is_local(conf.get("spark.master", "local")) or folder not in extra:
        return
    from pyspark.sql import functions as F

    host = "coalesce(try_reflect('java.net.InetAddress', 'getLocalHost'), 'an executor') AS host"
    lost = [
        f"try_reflect('java.lang.Class', 'forName', '{j.probe}') IS NULL AS j{i}"
        for i, j in enumerate(jars.SPARK_JARS)
    ]
    tasks = max(2, spark.sparkContext.defaultParallelism)
    per_host = sorted(
        spark.range(0, tasks, 1, tasks)
        .selectExpr(host, *lost)
        .groupBy("host")
        .agg(*(F.bool_or(f"j{i}").alias(f"j{i}") for i in range(len(jars.SPARK_JARS))))
        .collect()
    )
    where = "; ".join(
        f"{row['host']}: {', '.join(names)}"
        for row in per_host
        if (names := [j.file_name for i, j in enumerate(jars.SPARK_JARS) if row[f"j{i}"]])
    )
    if not where:
        hosts = ", ".join(row["host"] for row in per_host)
        print(f"[session] executors on {hosts} load the pinned jars from {folder}", flush=True)
        return
    raise WorkerJarsMissing(
        f"{WORKER_JARS_ENV}={folder}: Spark executors cannot load pinned jars from that "
        f"folder on their workers ({where}). Put the jars there on every worker (`make "
        f"setup` fetches them into .local/jars), or unset {WORKER_JARS_ENV} to send them "
        "with each application."
    )


# The Spark Connect client's own retry of an unreachable server backs off 50 ms × 4ⁿ up to a
# minute (pyspark's DefaultPolicy): after a server restart that took 20 s, its next try came at
# 68 s. Its backoff is capped at 10 s here, so a step learns within 10 s that the server is
# back (and, when the server forgot the session, fails at once, for Airflow's retry to start
# afresh); 33 tries still ride out an outage of about five minutes, as a slow restart on a
# loaded machine may take.
CONNECT_MAX_BACKOFF_MS = 10_000
CONNECT_RETRIES = 33


def connect_retry_policy() -> Any:
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=CONNECT_MAX_BACKOFF_MS)


@contextlib.contextmanager
def job_session(
    app_name: str,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
) -> Iterator[SparkSession]:
    """``build_session`` for one piece of work, ended with ``stop_session`` when it is done,
    unless this process already ran a local SparkContext that ``getOrCreate`` handed over: that
    session is its owner's to stop (ending it would end every later user's session)."""
    from pyspark import SparkContext

    inherited = remote is None and SparkContext._active_spark_context is not None
    spark = build_session(app_name, master=master, conf=conf, remote=remote)
    try:
        yield spark
    finally:
        if not inherited:
            stop_session(spark)


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
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return  # a Spark Connect client: no JVM of ours (a local one may serve someone else)
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:  # a gateway already closed
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
