"""The jars the pipeline runs with, pinned by version and SHA-256, fetched from Maven Central at
set-up (``make setup`` runs ``python -m spark_jobs.common.jars``), never at run time.

- Iceberg's Spark runtime for Spark 4.1 (the table format of every warehouse table);
- ``hadoop-aws`` matching the Hadoop client pyspark 4.1.3 bundles (3.4.2), with the AWS SDK
  ``bundle`` it was built against (2.29.52; Hadoop holds the SDK below 2.30, whose checksum
  changes broke third-party S3 stores);
- the PostgreSQL JDBC driver (the source reads and Iceberg's JDBC catalog);
- S3Proxy, a real S3 implementation over a local folder, for the tests, the demo and compose.

They live in ``$AUDITSYNC_JARS`` (default ``<checkout>/.local/jars``). Importing this module
costs nothing: the DAG and the runner only need the paths.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from watch_service.protocol.errors import AuditsyncError

MAVEN = "https://repo1.maven.org/maven2"
JARS_ENV = "AUDITSYNC_JARS"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / ".local" / "jars"


@dataclasses.dataclass(frozen=True)
class Jar:
    group: str
    artifact: str
    version: str
    sha256: str
    classifier: str = ""
    # A class only this jar holds, loaded without touching another jar's classes: what a JVM
    # is asked for to learn whether it has the jar (``session.check_worker_jars``).
    probe: str = ""

    @property
    def file_name(self) -> str:
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{tail}.jar"

    @property
    def url(self) -> str:
        folder = f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}"
        return f"{MAVEN}/{folder}/{self.file_name}"


ICEBERG = Jar(
    "org.apache.iceberg",
    "iceberg-spark-runtime-4.1_2.13",
    "1.11.0",
    "d6ea6c5d099288daeb7d5a92061bd3d7d8f296492632b42378e5f2f0e3066242",
    probe="org.apache.iceberg.Table",
)
HADOOP_AWS = Jar(
    "org.apache.hadoop",
    "hadoop-aws",
    "3.4.2",
    "d2d24e6b715b5656b9d238bf13b6682a07e2004dd36aad74a73aeb854319f4d9",
    probe="org.apache.hadoop.fs.s3a.Constants",
)
AWS_SDK = Jar(
    "software.amazon.awssdk",
    "bundle",
    "2.29.52",
    "62638f33045690c6bc5e496b54b0b2e89a9ad38cbedacdf6e017fea6bc85f55c",
    probe="software.amazon.awssdk.services.s3.S3Client",
)
POSTGRESQL = Jar(
    "org.postgresql",
    "postgresql",
    "42.7.4",
    "188976721ead8e8627eb6d8389d500dccc0c9bebd885268a3047180274a6031e",
    probe="org.postgresql.Driver",
)
S3PROXY = Jar(
    "org.gaul",
    "s3proxy",
    "4.1.0",
    "a4d025969aaf796616ed4b1e2491d87d455ce84bb28cb9db086b2e6aaa68b48d",
    classifier="jar-with-dependencies",
)
SPARK_JARS = (ICEBERG, HADOOP_AWS, AWS_SDK, POSTGRESQL)
ALL = (*SPARK_JARS, S3PROXY)


class JarsMissing(AuditsyncError):
    """A pinned jar is not in the jars folder; the message says how to fetch it."""


def jars_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get(JARS_ENV) or DEFAULT_DIR)


def path_of(jar: Jar, environ: Mapping[str, str] | None = None) -> Path:
    """The jar's file; ``JarsMissing`` when it was not fetched."""
    path = jars_dir(environ) / jar.file_name
    if not path.is_file():
        raise JarsMissing(
            f"{path} is missing: run `make setup` (or `python -m spark_jobs.common.jars`) to "
            f"fetch the pinned jars from Maven Central into {path.parent}"
        )
    return path


def spark_classpath(environ: Mapping[str, str] | None = None) -> list[str]:
    """The jars every Spark JVM of the pipeline carries, as paths."""
    return [str(path_of(jar, environ)) for jar in SPARK_JARS]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(jars: tuple[Jar, ...] = ALL, folder: Path | None = None) -> list[Path]:
    """Download what is missing or corrupt, verifying each SHA-256; returns the paths."""
    folder = folder or jars_dir()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for jar in jars:
        path = folder / jar.file_name
        if not (path.is_file() and _sha256(path) == jar.sha256):
            print(f"==> fetching {jar.url}", file=sys.stderr, flush=True)
            tmp = path.with_name(f".tmp-{jar.file_name}")
            with urllib.request.urlopen(jar.url, timeout=120) as response, open(tmp, "wb") as f:
                while block := response.read(1 << 20):
                    f.write(block)
            got = _sha256(tmp)
            if got != jar.sha256:
                tmp.unlink()
                raise JarsMissing(f"{jar.url}: SHA-256 {got}, expected the pinned {jar.sha256}")
            os.replace(tmp, path)
        out.append(path)
    return out


if __name__ == "__main__":
    try:
        fetch()
    except (OSError, JarsMissing) as exc:
        print(f"cannot fetch the pinned jars: {exc}", file=sys.stderr)
        sys.exit(2)
