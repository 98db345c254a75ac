"""Command-line pieces every job's ``main`` shares, so the mains' CLIs read alike (Airflow's
SparkSubmitOperator passes the same flags the pipeline runner does)."""
from __future__ import annotations

import argparse


def job_parser(step: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"spark-submit spark_jobs/{step}/main.py", description=description)
    parser.add_argument("--master", default=None,
                        help="Spark master when run with plain python (spark-submit sets its own)")
    return parser


def add_database(parser: argparse.ArgumentParser, partitions: bool = False) -> None:
    parser.add_argument("--database-url", required=True,
                        help="postgresql://user@host:port/db of the source of truth")
    parser.add_argument("--run-id", required=True,
                        help="the pipeline run these results belong to (reruns replace them)")
    if partitions:
        parser.add_argument("--num-partitions", type=int, default=4,
                            help="parallel JDBC queries striding over seq (default 4)")
