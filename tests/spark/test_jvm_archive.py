"""Which class archive a Spark driver is given (``spark_jobs.common.jvm_archive``): named by the
JDK, the pinned jars, pyspark and Spark's jars it was dumped with, so a change to any of them
names another file, and a driver whose class path the jars do not lead gets none. A JDK, a
Spark home and a jars folder are made of small files here: no JVM starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_jobs.common import jars, jvm_archive
from spark_jobs.common.session import ARCHIVE_OPTIONS, classpath, submit_flags, submit_options

pytestmark = pytest.mark.unit


@pytest.fixture
def world(tmp_path: Path) -> dict[str, str]:
    """An environment naming a JDK, a Spark home and a jars folder under ``tmp_path``."""
    jdk = tmp_path / "jdk"
    (jdk / "lib" / "server").mkdir(parents=True)
    (jdk / "lib" / "server" / "libjvm.so").write_bytes(b"jvm")
    (jdk / "release").write_text('JAVA_VERSION="17.0.15"\nJAVA_RUNTIME_VERSION="17.0.15+6"\n')
    spark = tmp_path / "spark"
    (spark / "jars").mkdir(parents=True)
    (spark / "jars" / "spark-core_2.13-4.1.3.jar").write_bytes(b"core")
    pinned = tmp_path / ".local" / "jars"
    pinned.mkdir(parents=True)
    for jar in jars.SPARK_JARS:
        (pinned / jar.file_name).write_bytes(jar.artifact.encode())
    return {
        "PATH": os.environ["PATH"],
        "JAVA_HOME": str(jdk),
        "SPARK_HOME": str(spark),
        jars.JARS_ENV: str(pinned),
    }


def test_the_archive_is_named_by_what_it_was_dumped_with(world: dict[str, str]):
    paths = classpath(world)
    first = jvm_archive.archive_path(paths, world)
    assert first is not None and first.parent == Path(world[jars.JARS_ENV]).parent / "cds"
    assert first.name.startswith("spark-") and first.suffix == ".jsa"
    assert jvm_archive.archive_path(paths, world) == first  # the same facts, the same name
    named = {first}
    # another JDK build, another Spark jar, another pinned jar's size: each names another file
    (Path(world["JAVA_HOME"]) / "release").write_text('JAVA_RUNTIME_VERSION="17.0.16+8"\n')
    named.add(jvm_archive.archive_path(paths, world))
    (Path(world["SPARK_HOME"]) / "jars" / "extra.jar").write_bytes(b"x")
    named.add(jvm_archive.archive_path(paths, world))
    Path(paths[0]).write_bytes(b"a longer iceberg runtime")
    named.add(jvm_archive.archive_path(paths, world))
    assert len(named) == 4 and None not in named


def test_no_archive_serves_a_class_path_with_a_non_empty_folder_or_spark_classpath(
    world: dict[str, str], tmp_path: Path
):
    paths = classpath(world)
    conf = tmp_path / "conf"
    conf.mkdir()
    assert jvm_archive.archive_path(paths, {**world, "SPARK_CONF_DIR": str(conf)}) is not None
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert jvm_archive.archive_path(paths, {**world, "SPARK_CONF_DIR": str(conf)}) is None
    assert jvm_archive.archive_path(paths, {**world, "SPARK_CLASSPATH": "/x.jar"}) is None
    assert jvm_archive.archive_path(paths, {**world, "JAVA_HOME": str(tmp_path / "no")}) is None


def test_a_driver_led_by_the_jars_maps_the_archive_once_it_is_built(world: dict[str, str]):
    paths = classpath(world)
    assert jvm_archive.options(paths, world) is None  # not built
    assert ARCHIVE_OPTIONS not in submit_options(world, master="local[2]")["conf"]
    built = jvm_archive.archive_path(paths, world)
    assert built is not None
    built.parent.mkdir(parents=True)
    built.write_bytes(b"archive")
    expected = (
        f"-XX:SharedArchiveFile={built} -Xshare:auto -Xlog:cds*=off -Xlog:cds*=warning:stderr"
    )
    assert jvm_archive.options(paths, world) == expected
    assert submit_options(world, master="local[2]")["conf"][ARCHIVE_OPTIONS] == expected
    server = submit_flags(world, master="local[2]", long_lived=True)
    assert f"{ARCHIVE_OPTIONS}={expected}" in server
    held = {**world, "AUDITSYNC_SPARK_WORKER_JARS": "/opt/auditsync/.local/jars"}
    assert submit_options(held, master="spark://m:7077")["conf"][ARCHIVE_OPTIONS] == expected
    # jars sent with the application are not on the driver's class path: no archive fits it
    assert ARCHIVE_OPTIONS not in submit_options(world, master="spark://m:7077")["conf"]
    assert jvm_archive.options(paths, {**world, jvm_archive.SWITCH_ENV: "off"}) is None
    built.unlink()  # removed: named no more, though its name was worked out before
    assert jvm_archive.options(paths, world) is None
