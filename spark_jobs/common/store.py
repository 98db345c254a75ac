"""The jobs' access to the run tables: a connection per call to the pipeline's database
(``pipeline_url``: ``args.pipeline_url``, else the source's ``args.database_url``), the SQL
itself in ``watch_service.store.runs`` (shared with the Airflow plugin)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import psycopg

from watch_service.store import runs


def pipeline_url(args) -> str:
    """Where the pipeline's state lives: its own database, or the source's when none is set
    ("" when neither is: a step called without a database records nothing)."""
    return getattr(args, "pipeline_url", None) or getattr(args, "database_url", None) or ""


@contextlib.contextmanager
def connect(url: str, transaction: bool = False) -> Iterator[psycopg.Connection]:
    """An autocommit connection, or with ``transaction`` one whose statements commit together
    when the block ends (roll back on error)."""
    with psycopg.connect(url, autocommit=True) as conn:
        if transaction:
            with conn.transaction():
                yield conn
        else:
            yield conn


def record_step(args, step: str, figures: Mapping[str, object]) -> None:
    """Merge a step's figures into ``pipeline_runs`` (nothing without a database URL)."""
    url = pipeline_url(args)
    if url:
        with connect(url) as conn:
            runs.record_step(conn, args.run_id, step, figures)


def record_snapshots(args, warehouse, names: tuple[str, ...]) -> None:
    """Record the tables' current snapshot ids (``warehouse.snapshots``) in ``pipeline_runs``
    (time travel, expiry)."""
    url = pipeline_url(args)
    if url:
        ids = warehouse.snapshots(names)
        with connect(url) as conn:
            runs.record_snapshots(conn, args.run_id, warehouse.layout.catalog, ids)
