"""Generated code only where it pays: a step over few rows runs its Spark plans interpreted.

Spark compiles Java (Janino) for every whole-stage-codegen stage and for most projections and
predicates. An incremental run of a few thousand records compiles about 250 such classes (135
in reconcile alone), and compiling them costs more than running them: measured on this 2-core
machine (``bench/pipeline.py``, +2,000 records in one process, load 10-12), a run took 88.0 s
as shipped and 60.5 s interpreted, its CPU 37.3 against 30.5 s. Over many rows the generated
code wins again, so the step says how many rows it handles and :func:`sized` turns code
generation off only below ``SMALL_ROWS``; at or above it, or when the count is not known
(None), the plans run as shipped.

The settings are runtime SQL settings of the step's own session (a Spark Connect client's
included), put back as they were when the block ends, so a long-lived session (the runner's,
the tests', a Connect server's) keeps its own for the next step or run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

SMALL_ROWS = 50_000
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def interpreted(rows: int | None) -> bool:
    """Whether a step over ``rows`` rows runs its plans interpreted (pure)."""
    return rows is not None and rows < SMALL_ROWS


def partitions(rows: int | None, wanted: int) -> int:
    """How many partitions a read of ``rows`` rows gets: one below ``SMALL_ROWS`` (each more is
    a task, and for a JDBC read a connection and a query, for a few hundred rows), else
    ``wanted`` (pure)."""
    return 1 if interpreted(rows) else wanted


@contextlib.contextmanager
def sized(spark: Any, rows: int | None) -> Iterator[bool]:
    """Inside: the session interprets its plans when ``interpreted(rows)``; yields which."""
    if not interpreted(rows):
        yield False
        return
    with settings(spark, INTERPRETED):
        yield True


@contextlib.contextmanager
def settings(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """Inside: the session runs with ``conf``; its own values (or their absence) come back after."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
