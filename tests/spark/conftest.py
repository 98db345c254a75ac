"""The spark test layer: ONE local SparkSession for the whole test session (a cold one costs
~6-10 s), built by the jobs' own session builder with the PostgreSQL JDBC driver."""

from __future__ import annotations

import os
import sys

import pytest

from spark_jobs.common.session import build_session, stop_session


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = build_session(
        "auditsync-tests",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.sql.adaptive.enabled": "false",
            "spark.driver.memory": "1g",
            # C1-only JIT and no whole-stage codegen come with every test JVM's SPARK_SUBMIT_OPTS
            # (support.SPARK_DEFAULTS, set in tests/conftest.py).
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    stop_session(session)  # the gateway closes while pytest's capture is open
