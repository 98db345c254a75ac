"""The arguments each Spark job's ``main.py`` gets under Airflow.

The flags and the folder layout are the pipeline runner's (``spark_jobs.warehouse.layout.Layout``,
what ``auditsync pipeline run`` passes), so Airflow and the runner cannot drift apart. The DAG
hands in Jinja templates as the roots and run id; the result is templated ``application_args``
that Airflow renders per run. They hold no database URL: the steps read it from
``AUDITSYNC_DATABASE_URL`` (``DATABASE_ENV``), so no password shows in ``ps``, and the
pipeline's own database from ``AUDITSYNC_PIPELINE_DATABASE_URL`` (``PIPELINE_ENV``: the
connection ``auditsync_pipeline``'s URI, empty without one: the source's database then holds
the pipeline's state too). Pure string building.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from spark_jobs.common.cli import DATABASE_URL_ENV, PIPELINE_URL_ENV
from spark_jobs.warehouse.layout import JOBS, STEPS, step_flags, step_package

DATABASE_ENV = DATABASE_URL_ENV
PIPELINE_ENV = PIPELINE_URL_ENV
PIPELINE_CONN_ID = "auditsync_pipeline"
# The templated environment every step gets: the source's URL, and the pipeline's when the
# connection auditsync_pipeline exists.
STEP_ENV = {
    DATABASE_ENV: "{{ conn.auditsync_pg.get_uri() }}",
    PIPELINE_ENV: (
        f"{{{{ conn.get('{PIPELINE_CONN_ID}').get_uri() if conn.get('{PIPELINE_CONN_ID}') "
        "else '' }}"
    ),
}

# The backfill main repairs both by default; ``--target`` makes it do one, so the DAG runs the
# audit log and the search index repairs as parallel tasks.
BACKFILL_TARGETS = ("audit_log", "search_index")


@dataclasses.dataclass(frozen=True)
class Paths:
    """The pipeline's roots (``landing``, ``warehouse``) and run id, as Jinja templates."""

    landing: str
    warehouse: str
    run_id: str


def project() -> Path:
    """The folder holding ``spark_jobs``: the checkout, or site-packages when installed (the DAG
    files ship inside auditsync_plugin, so their own path says nothing). Found, not imported."""
    spec = importlib.util.find_spec("spark_jobs")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("spark_jobs is not installed: pip install auditsync[pipeline]")
    return Path(next(iter(spec.submodule_search_locations))).parent


def application(project: Path, job: str) -> str:
    if job not in JOBS:
        raise ValueError(f"unknown Spark job {job!r}; expected one of {JOBS}")
    return str(project.joinpath(*step_package(job).split("."), "main.py"))


def args(job: str, paths: Paths, partitions: int = 4, target: str | None = None) -> list[str]:
    """``main.py`` arguments of ``job`` for one pipeline run; ``target`` only for backfill."""
    if job not in STEPS:
        raise ValueError(f"unknown Spark job {job!r}; expected one of {STEPS}")
    out = step_flags(job, paths.landing, paths.warehouse, paths.run_id, partitions)
    if target is not None:
        if job != "backfill" or target not in BACKFILL_TARGETS:
            raise ValueError(
                f"--target is for backfill, one of {BACKFILL_TARGETS}; got {job} {target!r}"
            )
        out += ["--target", target]
    return out


def maintenance_args(warehouse: str, retention_hours: str, target_file_mb: str) -> list[str]:
    """``spark_jobs/steps/maintenance/main.py`` arguments (templated values pass as text)."""
    return [
        "--work",
        warehouse,
        "--snapshot-retention-hours",
        retention_hours,
        "--target-file-size-mb",
        target_file_mb,
    ]
