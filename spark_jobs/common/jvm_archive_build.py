"""Building the Spark drivers' class archive (``jvm_archive``): ``make setup``'s step.

    python -m spark_jobs.common.jvm_archive_build            # build unless it exists
    python -m spark_jobs.common.jvm_archive_build --run DUMP.jsa CLASSPATH.txt

The build runs, in a child process, one local session as a pipeline run builds it
(``session.build_session``: the pinned jars, Iceberg's extensions, the run JVM's options) that
does in small what a run does, through the warehouse's own code: a throwaway PostgreSQL
(``EmbeddedPostgres``, migrated) holds the JDBC catalog and a source, the warehouse's tables
are created (``Warehouse.attach``), the audit log is appended to, merged into, read and
maintained (rewrite, expiry, orphans: Iceberg's procedures), the source's records are read over
JDBC, and Parquet is written and read as the landing zone is. Which classes the JVM loaded, not
what the data was, is what the archive keeps. The JVM writes the archive as it exits; a JVM on
the run's class path must then map it (``-Xshare:on``) before it takes the archive's name.

Anything that goes wrong is one warning line and exit 0: the JVMs then run without one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_jobs.common import jars, jvm_archive
from watch_service.protocol.errors import AuditsyncError

TIMEOUT_S = 900.0
# Variables the Spark launcher reads that change a JVM's class path or settings: the build
# runs without them, as a pipeline run does.
LAUNCHER_ENV = (
    "SPARK_CONF_DIR",
    "SPARK_CLASSPATH",
    "SPARK_SUBMIT_OPTS",
    "PYSPARK_SUBMIT_ARGS",
    "HADOOP_CONF_DIR",
    "YARN_CONF_DIR",
    "SPARK_DIST_CLASSPATH",
)


class ArchiveError(AuditsyncError):
    """The archive could not be built: the message says why."""


def build(environ: Mapping[str, str] | None = None) -> Path:
    """The archive for this checkout's pinned jars, built unless it exists; its path."""
    from spark_jobs.common.session import classpath

    env = dict(os.environ if environ is None else environ)
    for name in LAUNCHER_ENV:
        env.pop(name, None)
    paths = classpath(env)
    target = jvm_archive.archive_path(paths, env)
    if target is None:
        raise ArchiveError("no JDK, or no pyspark, where the Spark launcher looks for them")
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.parent / "build.log"
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
        dump, used = Path(tmp) / "dump.jsa", Path(tmp) / "classpath.txt"
        env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        argv = [sys.executable, "-m", __spec__.name, "--run", str(dump), str(used)]
        with open(log, "wb") as out:
            try:
                done = subprocess.run(
                    argv, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                raise ArchiveError(f"its run took over {TIMEOUT_S:.0f} s; see {log}") from None
        if done.returncode != 0 or not dump.is_file():
            raise ArchiveError(f"its run failed (exit {done.returncode}); see {log}")
        check_maps(dump, used.read_text().strip(), env, log)
        for old in target.parent.glob(f"{jvm_archive.KIND}-*"):
            old.unlink()
        dump.replace(target)
    described = {**(jvm_archive.facts(paths, env) or {}), "java_version": java_version(env)}
    target.with_suffix(".json").write_text(json.dumps(described, indent=2) + "\n")
    return target


def java(environ: Mapping[str, str]) -> str:
    home = jvm_archive.java_home(environ)
    return str(home / "bin" / "java") if home else "java"


def java_version(environ: Mapping[str, str]) -> str:
    done = subprocess.run([java(environ), "-version"], capture_output=True, text=True, check=False)
    return done.stderr.strip()


def check_maps(dump: Path, classpath: str, environ: Mapping[str, str], log: Path) -> None:
    """A JVM on the class path the run's driver had maps the archive (``-Xshare:on`` exits
    with an error otherwise)."""
    argv = [java(environ), f"-XX:SharedArchiveFile={dump}", "-Xshare:on", "-cp", classpath]
    done = subprocess.run([*argv, "-version"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        with open(log, "a") as out:
            out.write(f"\n$ {' '.join(argv)} -version\n{done.stdout}{done.stderr}")
        raise ArchiveError(f"a JVM on the run's class path does not map it; see {log}")


# -- the representative run (a child process: its JVM writes the archive as it exits) ----------
def loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def work(spark: Any, root: Path, url: str) -> None:
    """What a run does, in small, through the warehouse's and the steps' shared code."""
    from pyspark.sql import functions as F

    from spark_jobs.common import jdbc
    from spark_jobs.warehouse import tables
    from spark_jobs.warehouse.layout import Layout
    from spark_jobs.warehouse.schemas import conform
    from spark_jobs.warehouse.warehouse import Warehouse

    layout = Layout(landing=str(root / "landing"), work=str(root / "warehouse"), run_id="cds")
    warehouse = Warehouse.attach(spark, layout, url)
    rows = spark.range(0, 20, 1, 2).selectExpr(
        "CASE WHEN id % 2 = 0 THEN 'a' ELSE 'b' END AS topic",
        "id AS seq",
        "1748779200000 + id AS ts",
        "CAST(NULL AS string) AS tag",
        "CAST(NULL AS string) AS node",
        "CAST(NULL AS string) AS meta",
        "sha2(CAST(id AS string), 256) AS data",
        "sha2(sha2(CAST(id AS string), 256), 256) AS data_sha256",
        "'source' AS origin",
        "DATE'2025-06-01' AS date",
        "'cds' AS run_id",
    )
    log = conform(rows, tables.SCHEMAS["audit_log"][0])
    warehouse.append("audit_log", log, {tables.RUN_PROPERTY: "cds"})
    warehouse.merge("audit_log", log.withColumn("origin", F.lit("backfill")), [("a", 0, 19)])
    warehouse.read("audit_log").groupBy("topic").count().join(log, "topic", "left").collect()
    now = int(time.time() * 1000)
    warehouse.maintain("audit_log", cutoff=now, referenced=set(), target_file_mb=8)
    landing = str(root / "landing" / "part.parquet")
    log.write.mode("overwrite").parquet(landing)
    spark.read.parquet(landing).toPandas()
    jdbc.read_records(spark, jdbc.jdbc_target(url)).count()


def run(dump: str, classpath_file: str) -> int:
    from spark_jobs.common.session import build_session
    from watch_service.store.cluster import EmbeddedPostgres
    from watch_service.store.migrate import migrate

    with tempfile.TemporaryDirectory(prefix="auditsync-cds-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the cluster's own user (as root: postgres) must reach its folder
        pg = EmbeddedPostgres(root / "pg", loopback_port())
        url = pg.start()
        try:
            migrate(url)
            spark = build_session(
                "auditsync-cds",
                master="local[2]",
                conf={
                    jvm_archive.ARCHIVE_OPTIONS: f"-XX:ArchiveClassesAtExit={dump}",
                    "spark.ui.enabled": "false",
                },
            )
            spark.sparkContext.setLogLevel("ERROR")
            gateway_jvm: Any = spark.sparkContext._jvm
            Path(classpath_file).write_text(gateway_jvm.System.getProperty("java.class.path"))
            work(spark, root, url)
            exit_jvm(spark)
        finally:
            pg.destroy()
    return 0


def exit_jvm(spark: Any) -> None:
    """Stop the session and wait for its JVM to exit: it writes the archive as it exits
    (a minute or more on a loaded machine), longer than ``stop_session`` waits."""
    from pyspark import SparkContext

    spark.stop()
    gateway: Any = SparkContext._gateway
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=TIMEOUT_S)
    SparkContext._gateway = None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--run"]:
        return run(*argv[1:3])
    try:
        path = build()
    except (ArchiveError, jars.JarsMissing, OSError) as exc:
        print(f"!! no JVM class archive: {exc}; Spark JVMs start without one", file=sys.stderr)
        return 0
    print(f"==> JVM class archive for Spark: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
