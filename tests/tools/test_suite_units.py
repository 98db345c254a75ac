"""The suite's units under ``pytest -n 3`` (tests/conftest.py): what runs together, and the order
they are handed out in. A module that moves must take its place in these tables with it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ..conftest import BY_STORAGE, LONG_UNITS, SHARED_UNITS, unit_order, work_unit

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_every_module_the_tables_name_exists():
    shared = [m for modules in SHARED_UNITS.values() for m in modules]
    long_modules = [u.split("[", 1)[0] for u in LONG_UNITS if u not in SHARED_UNITS]
    missing = [m for m in (*shared, *BY_STORAGE, *long_modules) if not (ROOT / m).is_file()]
    assert missing == []


# The session fixtures of tests/airflow/conftest.py that are made once per worker by a run of
# ``airflow dags test`` (after the home, the landing and the Spark Connect server are built).
FAULT_UNIT_RUNS = {"fault_run", "phantom_run", "phantom_connect_run"}


def test_every_module_that_asks_for_the_fault_unit_s_runs_is_in_its_unit():
    asking = set()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and FAULT_UNIT_RUNS & {
                a.arg for a in node.args.args
            }:
                asking.add(path.relative_to(ROOT).as_posix())
    assert asking and asking <= set(SHARED_UNITS["airflow fault run"])


def test_a_test_belongs_to_its_shared_unit_its_storage_or_its_module():
    assert work_unit("tests/airflow/test_phantom.py::test_x") == "airflow fault run"
    assert work_unit("tests/spark/test_crash.py::test_y[s3]") == "tests/spark/test_crash.py[s3]"
    assert work_unit("tests/spark/test_rewind.py::test_z[s3]") == "tests/spark/test_rewind.py"
    assert work_unit("tests/service/test_cli.py::test_a") == "tests/service/test_cli.py"


def test_long_units_first_then_heavy_folders_then_the_rest():
    units = [
        "tests/service/test_cli.py",
        "tests/spark/test_rewind.py",
        "tests/e2e/test_credentials.py",
        "tests/sink/test_pure.py",
        "airflow fault run",
        "tests/airflow/test_dagbag.py",
        "tests/airflow/test_live_schedule.py",
    ]
    assert unit_order(units) == [
        "tests/airflow/test_live_schedule.py",
        "airflow fault run",
        "tests/e2e/test_credentials.py",
        "tests/spark/test_rewind.py",
        "tests/airflow/test_dagbag.py",
        "tests/service/test_cli.py",
        "tests/sink/test_pure.py",
    ]
