"""The warehouse layout: which Iceberg table each pipeline step reads and writes, and the
arguments each step's ``run(spark, args)`` gets. Pure naming, shared by ``auditsync pipeline
run`` (``spark_jobs.runner``) and the Airflow DAG so they cannot drift apart; importing it
costs nothing (no pyspark, no psycopg, no pyarrow), as DAG parsing requires.

The landing zone and the warehouse are locations (a path, ``file://…`` or ``s3://bucket/…``;
``watch_service.storage`` parses them). Every warehouse table is an Iceberg table in the JDBC
catalog kept in the project's PostgreSQL (schema ``iceberg``), under the catalog name
``catalog`` (derived from the warehouse's URI, so several warehouses share one database) and
the namespace ``audit``:

    deliveries    compact's batches (one row per delivered frame item, ``batch`` N); the
                  landing segments a batch consumed are in its snapshot's summary
    detail        reconcile's verdicts, partitioned by run_id
    summary       reconcile's counts per (consumer, topic, status), by run_id
    ledger        reconcile's non-delivered verdicts (for late copies), by run_id
    remaining     verify's defects left after backfill, by run_id
    audit_log     one row per topic+seq, partitioned by topic and UTC date
    audit_detail  audit_summary: a full audit's verdicts, by run_id
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib

from watch_service.storage import Location

STEPS = ("compact", "reconcile", "backfill", "verify")
# The snapshot summary property of the commits that converted a hand-written-layout warehouse
# (``spark_jobs.legacy``); its value is the old warehouse's id.
LEGACY_PROPERTY = "auditsync.legacy"
# Every Spark job Airflow runs: the pipeline's steps, and maintenance (its own daily DAG,
# never part of a pipeline run).
JOBS = (*STEPS, "maintenance")


def step_package(job: str) -> str:
    """The dotted package of a Spark job, e.g. ``spark_jobs.steps.verify``."""
    return f"spark_jobs.steps.{job}"


NAMESPACE = "audit"
TABLES = (
    "deliveries",
    "detail",
    "summary",
    "ledger",
    "remaining",
    "audit_log",
    "audit_detail",
    "audit_summary",
)


def _template(text: object) -> bool:
    return "{{" in str(text)


@dataclasses.dataclass(frozen=True)
class Layout:
    landing: str
    work: str
    run_id: str

    def __post_init__(self) -> None:
        # Parse once: an unsupported scheme fails here, with the location in the message.
        # An Airflow template ("{{ var.value.… }}") is rendered later, by Airflow: kept as is.
        object.__setattr__(self, "landing", str(self.landing))
        object.__setattr__(self, "work", str(self.work))
        if self.landing and not _template(self.landing):  # steps after compact need none
            object.__setattr__(self, "landing", str(Location.parse(self.landing)))
        if not _template(self.work):
            object.__setattr__(self, "work", str(Location.parse(self.work)))

    @property
    def landing_location(self) -> Location:
        if not self.landing:
            raise ValueError("this layout has no landing zone (a step after compact)")
        return Location.parse(self.landing)

    @property
    def warehouse(self) -> Location:
        return Location.parse(self.work)

    @property
    def catalog(self) -> str:
        """The Iceberg catalog name of this warehouse (also its id in the run tables)."""
        return "wh_" + hashlib.sha256(self.work.encode()).hexdigest()[:16]

    def table(self, name: str) -> str:
        catalog, qualified = self.dataset(name)
        return f"{catalog}.{qualified}"

    def dataset(self, name: str) -> tuple[str, str]:
        """``name``'s catalog and its name inside it (``audit.<name>``): what lineage and the
        published Assets call the table."""
        if name not in TABLES:
            raise ValueError(f"unknown warehouse table {name!r}; expected one of {TABLES}")
        return self.catalog, f"{NAMESPACE}.{name}"

    def step_args(self, step: str, partitions: int = 4) -> list[str]:
        """The step's own flags (never the database URL: it travels in the environment)."""
        return step_flags(step, self.landing, self.work, self.run_id, partitions)

    def namespace(
        self,
        step: str,
        database_url: str | None = None,
        partitions: int = 4,
        pipeline_url: str | None = None,
        **extra: object,
    ) -> argparse.Namespace:
        """What ``step``'s parser makes of ``step_args``, for calling ``run`` in-process;
        ``pipeline_url`` None: the pipeline's state lives in the source's database."""
        values: dict[str, object] = {
            "work": self.work,
            "run_id": self.run_id,
            "database_url": database_url,
            "pipeline_url": pipeline_url,
            "master": None,
            "landing": self.landing,
            "num_partitions": partitions,
            "target": "both",
            "examples": 5,
            "full": False,
            "max_pushdown_ranges": 1000,
        }
        values.update(extra)
        return argparse.Namespace(**values)


def step_flags(step: str, landing: str, work: str, run_id: str, partitions: int = 4) -> list[str]:
    """The step's own flags, its locations passed as given: the DAG hands in Jinja templates,
    which only the step, once Airflow has rendered them, parses (a template parsed here would
    become a local folder named after it)."""
    if step not in STEPS:
        raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
    common = ["--work", work, "--run-id", run_id]
    extra = {
        "compact": ["--landing", landing],
        "reconcile": ["--num-partitions", str(partitions)],
        "backfill": ["--num-partitions", str(partitions)],
        "verify": [],
    }[step]
    return [*common, *extra]
