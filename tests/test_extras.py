"""Install what you use: the service and ``auditsync watch`` import nothing from the pipeline's
and Airflow's packages (Spark, Airflow, Great Expectations), nor the gRPC surface's (grpc,
authzed) unless a gRPC port is enabled. Checked in a fresh interpreter's ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .support import ROOT

pytestmark = pytest.mark.unit

HEAVY = {"pyspark", "airflow", "great_expectations"}
AUTHZ = {"grpc", "authzed"}

PROBE = """
import json, sys
from watch_service.app import create_app
from watch_service.cli import build_parser
from watch_service.settings import Settings
from watch_service.sink import watch_command
from watch_service.sink import command
create_app(Settings(grpc_port={grpc_port}), "postgresql://probe@127.0.0.1:1/probe")
build_parser().parse_args(["serve"])
watch_command.build_parser().parse_args(["--topics", "a"])
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


def top_modules(grpc_port: int | None) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(grpc_port=grpc_port)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return set(json.loads(out))


def test_core_service_and_watch_import_no_pipeline_airflow_or_grpc():
    assert top_modules(None) & (HEAVY | AUTHZ) == set()


def test_the_grpc_surface_imports_its_extra_only_when_enabled():
    loaded = top_modules(50051)
    assert loaded >= AUTHZ
    assert loaded & HEAVY == set()
