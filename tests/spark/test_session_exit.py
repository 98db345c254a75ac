"""A green run ends without py4j's "--- Logging error ---" (issue 23, item 3): a pytest of its
own, in a subprocess, uses this layer's ``spark`` fixture (which ends its session with
``stop_session``, as every job's ``main`` and the runner do) with a root log handler on the
captured stderr (what ``auditsync``'s ``logs.configure`` installs when a test runs the CLI in
process), and its stderr, interpreter exit included, holds no logging error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]

INNER = """
import logging


def test_a_spark_session_with_a_root_handler_on_captured_stderr(spark):
    root = logging.getLogger()
    root.addHandler(logging.StreamHandler())  # pytest's capture: closed before exit
    root.setLevel(logging.INFO)
    assert spark.range(3).count() == 3
"""


def test_spark_session_ends_without_a_logging_error(tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.spark.conftest import spark  # noqa: F401\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout
    assert "Logging error" not in proc.stderr, proc.stderr[-3000:]
    assert "I/O operation on closed file" not in proc.stderr
