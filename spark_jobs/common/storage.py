"""Directory moves through Hadoop's FileSystem API (local disk, HDFS, object stores alike), for
outputs that are rebuilt from their own previous version and so cannot be overwritten in
place: write a staged copy beside the target, then swap it in."""
from __future__ import annotations

from pyspark.sql import SparkSession


def _fs_path(spark: SparkSession, path: str):
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def exists(spark: SparkSession, path: str) -> bool:
    fs, hpath = _fs_path(spark, path)
    return bool(fs.exists(hpath))


def matches(spark: SparkSession, pattern: str) -> bool:
    """Whether any file matches the glob ``pattern``."""
    fs, hpath = _fs_path(spark, pattern)
    found = fs.globStatus(hpath)
    return found is not None and len(found) > 0


def delete(spark: SparkSession, path: str) -> None:
    fs, hpath = _fs_path(spark, path)
    if fs.exists(hpath):
        fs.delete(hpath, True)


def current(spark: SparkSession, target: str) -> str | None:
    """Where ``target``'s latest complete version is: itself, or its retired copy when a
    crash interrupted a swap after moving it aside; None when there is none."""
    for path in (target, f"{target}.retired"):
        if exists(spark, path):
            return path
    return None


def swap_in(spark: SparkSession, staged: str, target: str) -> None:
    """Replace ``target`` with ``staged``. The old copy is renamed aside first and deleted
    last, so a crash in between leaves either version under a known name, never neither."""
    fs, target_path = _fs_path(spark, target)
    _, staged_path = _fs_path(spark, staged)
    retired = f"{target}.retired"
    _, retired_path = _fs_path(spark, retired)
    if fs.exists(retired_path):
        fs.delete(retired_path, True)
    if fs.exists(target_path) and not fs.rename(target_path, retired_path):
        raise OSError(f"could not move {target} aside to {retired}")
    if not fs.rename(staged_path, target_path):
        raise OSError(f"could not move {staged} to {target}")
    fs.delete(retired_path, True)
