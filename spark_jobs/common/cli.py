"""Command-line pieces every job's ``main`` shares, so the mains' CLIs read alike (Airflow's
SparkSubmitOperator passes the same flags the pipeline runner does).

The database URL carries a password, and a process's arguments are visible to every user of
the machine (``ps``): callers hand it over in ``AUDITSYNC_DATABASE_URL`` instead, which
``--database-url`` defaults to.

The pipeline's own state (the Iceberg JDBC catalog, the run tables, the range digests, the
alert ledger) lives in the pipeline database: ``AUDITSYNC_PIPELINE_DATABASE_URL``, which
``--pipeline-database-url`` defaults to; unset, the source's database holds it too.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

DATABASE_URL_ENV = "AUDITSYNC_DATABASE_URL"
PIPELINE_URL_ENV = "AUDITSYNC_PIPELINE_DATABASE_URL"


def job_parser(step: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"spark-submit spark_jobs/{step}/main.py", description=description
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master when run with plain python (spark-submit sets its own)",
    )
    return parser


def add_database(
    parser: argparse.ArgumentParser,
    partitions: bool = False,
    required: bool = True,
    environ: Mapping[str, str] | None = None,
) -> None:
    """``--database-url`` (default: ``$AUDITSYNC_DATABASE_URL``) and ``--run-id``; both
    required unless ``required=False`` (a step that records figures only when given them)."""
    env = os.environ if environ is None else environ
    from_env = env.get(DATABASE_URL_ENV) or None
    parser.add_argument(
        "--database-url",
        default=from_env,
        required=required and from_env is None,
        help=f"postgresql://user@host:port/db of the source of truth (default: "
        f"${DATABASE_URL_ENV}, which keeps a password out of `ps`)",
    )
    parser.add_argument(
        "--pipeline-database-url",
        dest="pipeline_url",
        default=env.get(PIPELINE_URL_ENV) or None,
        help=f"postgresql://… of the pipeline's own state: catalog, run tables, digests "
        f"(default: ${PIPELINE_URL_ENV}, else the source's database)",
    )
    parser.add_argument(
        "--run-id",
        required=required,
        default=None,
        help="the pipeline run these results belong to (reruns replace them)",
    )
    if partitions:
        parser.add_argument(
            "--num-partitions",
            type=int,
            default=4,
            help="parallel JDBC queries striding over seq (default 4)",
        )
