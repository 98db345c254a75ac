"""Rewriting only the touched partitions of the audit log, with atomic visibility.

The audit log is Parquet partitioned by ``topic`` and ``date``, one row per topic+seq. A run
merges its fresh rows into the partitions they fall in and nowhere else:

1. the touched partitions' current rows and the fresh rows are merged and written by Spark
   to ``audit_log/_staging/<run_id>/`` (ignored by readers: ``_`` prefix);
2. the journal ``audit_log/_swaps/<run_id>.json`` lists the partitions to swap (commit point);
3. each staged partition folder is swapped in (``storage.swap_in``: old folder aside, new one
   in, old one deleted), then journal and staging are removed.

A reader sees each partition either before or after the run, never half of it and never a
topic+seq twice. ``recover`` rolls a crashed run forward from its journal (or discards
staging written before the journal existed); every writer calls it first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.common import partitions, storage, warehouse
from spark_jobs.common.schemas import AUDIT_LOG


def recover(root: Path) -> None:
    swaps = root / "_swaps"
    if swaps.is_dir():
        for name in sorted(os.listdir(swaps)):
            journal = storage.read_json(swaps / name, {})
            staged = Path(journal.get("staged", root / "_staging" / "none"))
            for rel in journal.get("folders", []):
                if (staged / rel).is_dir():
                    storage.swap_in(staged / rel, root / rel)
                else:
                    storage.recover_swap(root / rel)
            storage.remove(swaps / name)
    storage.remove(root / "_staging")


def current(spark: SparkSession, root: Path, folders: list[str]) -> DataFrame:
    """The rows of the given partitions today."""
    return warehouse.read_partitions(spark, root, folders, AUDIT_LOG)


def replace(
    spark: SparkSession,
    root: Path,
    run_id: str,
    merged: DataFrame,
    touched: list[str],
    hook: Callable[[str], None] | None = None,
) -> list[str]:
    """Write ``merged`` (the full new content of the ``touched`` partitions) and swap it in;
    returns the partition folders written."""
    staged = root / "_staging" / run_id
    merged.write.mode("overwrite").partitionBy("topic", "date").parquet(str(staged))
    written = sorted({str(p.parent.relative_to(staged)) for p in storage.data_files(staged)})
    strange = set(written) - set(touched)
    if strange:
        raise RuntimeError(
            f"audit log: Spark wrote partitions {sorted(strange)} that were "
            f"not expected ({partitions.__name__} escaping disagrees)"
        )
    storage.write_json(
        root / "_swaps" / f"{run_id}.json", {"staged": str(staged), "folders": written}
    )
    for rel in written:
        storage.swap_in(staged / rel, root / rel)
        if hook:
            hook("backfill.swapping")
    storage.remove(root / "_swaps" / f"{run_id}.json")
    storage.remove(staged)
    return written
