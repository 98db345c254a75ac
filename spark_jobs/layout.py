"""The warehouse layout: where each pipeline step reads and writes under ``--work``, and the
arguments each step's ``run(spark, args)`` gets. Pure path building, shared by ``auditsync
pipeline run`` (``spark_jobs.runner``) and the Airflow DAG so they cannot drift apart;
importing it costs nothing (no pyspark, no psycopg), as DAG parsing requires.

Under ``--work`` (layout version 2, the incremental pipeline)::

    _layout.json                           {"version": 2}
    deliveries/consumer=C/topic=T/bN-*.parquet   compact's batches, appended
    deliveries/_batches/bNNNNNNNN.json     a batch's commit record (segments consumed, files)
    ledger/run=R/consumer=C/topic=T/       reconcile's non-delivered verdicts, for late copies
    audit_log/topic=T/date=D/              the audit log; only touched partitions rewritten
    runs/R/detail/ summary/ remaining/     one run's window, its counts, defects left
    runs/R/manifest.json                   batches the run read, audit partitions it wrote
    audits/A/detail/ summary/              a full audit's verdicts
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

STEPS = ("compact", "reconcile", "backfill", "verify")
LAYOUT_VERSION = 2


@dataclasses.dataclass(frozen=True)
class Layout:
    landing: Path
    work: Path
    run_id: str

    @property
    def marker(self) -> Path:
        return self.work / "_layout.json"

    @property
    def deliveries(self) -> Path:
        return self.work / "deliveries"

    @property
    def batches(self) -> Path:
        return self.deliveries / "_batches"

    @property
    def ledger(self) -> Path:
        return self.work / "ledger"

    @property
    def audit_log(self) -> Path:
        return self.work / "audit_log"

    @property
    def runs(self) -> Path:
        return self.work / "runs"

    @property
    def run_dir(self) -> Path:
        return self.runs / self.run_id

    def run_path(self, name: str, run_id: str | None = None) -> Path:
        return self.runs / (run_id or self.run_id) / name

    @property
    def manifest(self) -> Path:
        return self.run_dir / "manifest.json"

    @property
    def audit_dir(self) -> Path:
        return self.work / "audits" / self.run_id

    def step_args(self, step: str, partitions: int = 4) -> list[str]:
        """The step's own flags (never the database URL: it travels in the environment)."""
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
        common = ["--work", str(self.work), "--run-id", self.run_id]
        extra = {
            "compact": ["--landing", str(self.landing)],
            "reconcile": ["--num-partitions", str(partitions)],
            "backfill": ["--num-partitions", str(partitions)],
            "verify": [],
        }[step]
        return [*common, *extra]

    def namespace(
        self, step: str, database_url: str | None = None, partitions: int = 4, **extra: object
    ) -> argparse.Namespace:
        """What ``step``'s parser makes of ``step_args``, for calling ``run`` in-process."""
        values: dict[str, object] = {
            "work": str(self.work),
            "run_id": self.run_id,
            "database_url": database_url,
            "master": None,
            "landing": str(self.landing),
            "num_partitions": partitions,
            "target": "both",
            "examples": 5,
            "full": False,
            "max_pushdown_ranges": 1000,
        }
        values.update(extra)
        return argparse.Namespace(**values)

    def quality_paths(self) -> dict[str, Path]:
        """One run's slice for Great Expectations (``spark_jobs.common.slices`` reads them)."""
        return {
            "reconciliation": self.run_path("summary"),
            "detail": self.run_path("detail"),
            "remaining": self.run_path("remaining"),
            "manifest": self.manifest,
        }
