"""A class-data-sharing archive (the JDK's AppCDS) for the pipeline's Spark JVMs: its name
and the options that map it.

A short Spark JVM spends much of its CPU loading, parsing and verifying the same 20,000-odd
classes from the same jars as the one before it: a cold local session cost 16.9 CPU-s here,
8.3 with an archive of them. ``make setup`` builds the archive once (``jvm_archive_build``: a
representative run dumps the classes it loaded, ``-XX:ArchiveClassesAtExit``, a dynamic
archive on top of the JDK's own), and every Spark driver JVM the pipeline launches maps it
(``-XX:SharedArchiveFile`` in ``spark.driver.defaultJavaOptions``: ``session.submit_options``).

An archive is only valid for the JVM build and the class path it was dumped with, and a class
path must hold no non-empty directory: the Spark launcher puts the jars on it as
``<--driver-class-path>:<SPARK_CONF_DIR>:<SPARK_HOME>/jars/*``, so it serves the JVMs whose
class path starts with the pinned jars (a local master; a cluster whose workers hold the jars)
and whose ``SPARK_CONF_DIR`` is pyspark's own, absent, ``conf`` folder. Its file name is a
digest of everything that decides that (``facts``): the JDK (its release string, the path, size
and time of ``libjvm.so``), each pinned jar's path and size, pyspark's version and the names and
sizes of Spark's jars, the configuration folder. When one changes, no archive of that name
exists, so none is named until ``make setup`` builds the new one; and should a file still not
fit, the JVM runs without it (``-Xshare:auto``), with one warning line on standard error
(``QUIET``). Nothing is built at run time. ``AUDITSYNC_CDS=off`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from spark_jobs.common import jars

SWITCH_ENV = "AUDITSYNC_CDS"
# Where a driver is given the archive: Spark's setting for the options an administrator gives
# every driver, put before ``spark.driver.extraJavaOptions``, so a job or a test that sets
# extra options of its own keeps the archive.
ARCHIVE_OPTIONS = "spark.driver.defaultJavaOptions"
KIND = "spark"
# A JVM that cannot use an archive says so as a warning, which goes to standard output by
# default, into what a step prints: to standard error instead.
QUIET = "-Xlog:cds*=off -Xlog:cds*=warning:stderr"
# What ``facts`` looks up: the JDK, Spark's home, the launcher's class path.
LOOKUP_ENV = ("JAVA_HOME", "PATH", "SPARK_HOME", "SPARK_CONF_DIR", "SPARK_CLASSPATH")


def archive_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Beside the jars folder: ``.local/cds`` in a checkout."""
    return jars.jars_dir(environ).parent / "cds"


def java_home(environ: Mapping[str, str]) -> Path | None:
    """The JDK the Spark launcher runs: ``$JAVA_HOME``, else ``java`` on ``PATH``."""
    if environ.get("JAVA_HOME"):
        return Path(environ["JAVA_HOME"]).resolve()
    java = shutil.which("java", path=environ.get("PATH"))
    return Path(java).resolve().parent.parent if java else None


def spark_home(environ: Mapping[str, str]) -> Path | None:
    """``$SPARK_HOME``, else the installed pyspark's folder (without importing it)."""
    if environ.get("SPARK_HOME"):
        return Path(environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def facts(classpath: Sequence[str], environ: Mapping[str, str]) -> dict | None:
    """What an archive for a driver with ``classpath`` first depends on (see the module's
    docstring), or None where no archive can serve it (no JDK or Spark found, a non-empty
    configuration folder or a ``SPARK_CLASSPATH`` on the class path)."""
    home, spark = java_home(environ), spark_home(environ)
    if home is None or spark is None or environ.get("SPARK_CLASSPATH"):
        return None
    conf = Path(environ.get("SPARK_CONF_DIR") or spark / "conf")
    if conf.is_dir() and any(conf.iterdir()):
        return None
    try:
        release = (home / "release").read_text()
        libjvm = (home / "lib" / "server" / "libjvm.so").resolve(strict=True)
        jvm = libjvm.stat()
        spark_jars = sorted((p.name, p.stat().st_size) for p in (spark / "jars").glob("*.jar"))
        pinned = [(path, Path(path).stat().st_size) for path in classpath]
        pyspark = importlib.metadata.version("pyspark")
    except (OSError, importlib.metadata.PackageNotFoundError):
        return None
    runtime = [x for x in release.splitlines() if x.startswith("JAVA_RUNTIME_VERSION=")]
    return {
        "java": {
            "runtime": runtime[0].split("=", 1)[1].strip('"') if runtime else release,
            "libjvm": [str(libjvm), jvm.st_size, jvm.st_mtime_ns],
        },
        "classpath": pinned,
        "conf_dir": str(conf),
        "pyspark": pyspark,
        "spark_jars": hashlib.sha256(json.dumps(spark_jars).encode()).hexdigest(),
    }


def archive_path(classpath: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    """Where the archive for these ``facts`` is (or would be), or None."""
    found = facts(classpath, environ)
    if found is None:
        return None
    digest = hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()[:16]
    return archive_dir(environ) / f"{KIND}-{digest}.jsa"


@functools.lru_cache(maxsize=8)
def _cached_path(classpath: tuple[str, ...], environ: tuple[tuple[str, str], ...]) -> Path | None:
    return archive_path(classpath, dict(environ))


def options(classpath: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """The JVM options that map the archive for a driver whose class path starts with
    ``classpath``, or None when none fits (or ``AUDITSYNC_CDS=off``). Its path is worked out
    once per class path and environment (it stats Spark's 250-odd jars); whether the file is
    there is asked each time."""
    env = os.environ if environ is None else environ
    if env.get(SWITCH_ENV, "").lower() in ("off", "0", "false", "no"):
        return None
    keys = (*LOOKUP_ENV, jars.JARS_ENV)
    path = _cached_path(tuple(classpath), tuple((k, env[k]) for k in keys if k in env))
    if path is None or not path.is_file() or any(c.isspace() or c in "\"'" for c in str(path)):
        return None  # a path that needs quoting: each launcher quotes differently, so go without
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {QUIET}"
