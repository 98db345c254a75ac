"""The suite's units under ``pytest -n 3`` (tests/conftest.py): what runs together, and the order
they are handed out in. A module that moves must take its place in these tables with it."""

from __future__ import annotations

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
