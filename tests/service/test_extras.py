"""Install what you use: the service and ``auditsync watch`` import nothing from the pipeline's
and Airflow's packages (Spark, Airflow, Great Expectations), nor the gRPC surface's (grpc,
authzed) unless a gRPC port is enabled. Checked in a fresh interpreter's ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.unit

HEAVY = {"pyspark", "airflow", "great_expectations"}
AUTHZ = {"grpc", "authzed"}

PROBE = """
import json, sys
from watch_service.app import create_app
from watch_service.cli import build_parser
from watch_service.settings import Settings
url = "postgresql://probe@127.0.0.1:1/probe"
def tops():
    return sorted({name.split(".")[0] for name in sys.modules})
create_app(Settings(), url)
build_parser().parse_args(["serve"])
serve = tops()
from watch_service.sink import watch_command
from watch_service.sink import command
watch_command.build_parser().parse_args(["--topics", "a"])
core = tops()
create_app(Settings(grpc_port=50051), url)
print(json.dumps([core, tops(), serve]))
"""


@pytest.fixture(scope="module")
def loaded() -> tuple[set[str], set[str], set[str]]:
    """Top-level modules loaded by the core service and watch, then with gRPC enabled too, and
    by ``serve`` alone."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    core, with_grpc, serve = json.loads(out)
    return set(core), set(with_grpc), set(serve)


def test_core_service_and_watch_import_no_pipeline_airflow_or_grpc(loaded):
    assert loaded[0] & (HEAVY | AUTHZ) == set()


def test_serve_imports_no_pyarrow(loaded):
    """pyarrow is the sink's extra (``auditsync[sink]``), not the core install's."""
    assert "pyarrow" not in loaded[2]
    assert "pyarrow" in loaded[0]  # the sink's command, imported after, does


def test_the_grpc_surface_imports_its_extra_only_when_enabled(loaded):
    assert loaded[1] >= AUTHZ
    assert loaded[1] & HEAVY == set()


def test_uv_is_bootstrapped_without_touching_the_system_python(tmp_path):
    """Without uv on PATH, `make` gets it into a venv of its own under .local (Debian marks the
    system Python externally managed) and syncs with that uv; a dry run shows the recipe."""
    no_uv = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "uv").exists()]
    env = {"PATH": os.pathsep.join(no_uv), "HOME": str(tmp_path)}
    plan = subprocess.run(
        ["make", "-n", "-B", "uv", "venv"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "python3 -m venv .local/uv-bootstrap" in plan
    assert ".local/uv-bootstrap/bin/python -m pip install -q uv" in plan
    assert f"{ROOT}/.local/uv-bootstrap/bin/uv sync --frozen --all-extras" in plan
    assert "python3 -m pip install" not in plan.replace("bin/python -m pip", "")
