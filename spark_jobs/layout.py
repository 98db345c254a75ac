"""The warehouse layout: where each pipeline step reads and writes under ``--work``, and the
flags each job's ``main.py`` gets. Pure path building, shared by ``auditsync pipeline run``
(``spark_jobs.runner``) and the Airflow DAG (``auditsync_plugin.jobs``) so they cannot drift
apart; importing it costs nothing (no pyspark, no psycopg), as DAG parsing requires."""
from __future__ import annotations

import dataclasses
from pathlib import Path

STEPS = ("compact", "reconcile", "backfill", "verify")


@dataclasses.dataclass(frozen=True)
class Layout:
    landing: Path
    work: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return self.work / "runs" / self.run_id

    def step_args(self, step: str, database_url: str, partitions: int) -> list[str]:
        """The job's own flags: what Airflow would pass too."""
        db = ["--database-url", database_url, "--run-id", self.run_id]
        deliveries, detail = str(self.work / "deliveries"), str(self.run_dir / "detail")
        audit_log = str(self.work / "audit_log")
        return {
            "compact": ["--landing", str(self.landing), "--out", deliveries, *db],
            "reconcile": ["--deliveries", deliveries, "--out", str(self.run_dir), *db,
                          "--num-partitions", str(partitions)],
            "backfill": ["--deliveries", deliveries, "--detail", detail, "--audit-log", audit_log,
                         *db, "--num-partitions", str(partitions)],
            "verify": ["--detail", detail, "--audit-log", audit_log,
                       "--out", str(self.run_dir / "remaining"), *db],
        }[step]
