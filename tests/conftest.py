"""Session-wide real parts: a throwaway PostgreSQL cluster, the service over a socket, and one
real S3 server (S3Proxy) for the tests that run on both storages."""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import aiohttp
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from watch_service.settings import Settings
from watch_service.store.cluster import EmbeddedPostgres
from watch_service.store.migrate import migrate
from watch_service.tools.local import use_port_block

from .support import TEST_JVM_OPTIONS, InProcessService, free_port, unique

# The headless Chromium every browser test launches; what each work unit cost, printed at the end.
pytest_plugins = ("tests.browser", "tests.unit_cost")


def pytest_configure(config) -> None:
    """Every Spark JVM this test process launches carries the PostgreSQL JDBC driver, and the
    tests' Spark defaults (``support.SPARK_DEFAULTS``: C1-only JIT, no whole-stage codegen),
    through ``SPARK_SUBMIT_OPTS``, which every process the tests start inherits.

    A driver JVM is started once per process and jars cannot join its classpath later, so
    whichever test starts Spark first (the GX operator in tests/airflow, or the spark layer's
    shared session) must start it with the driver, or later JDBC reads fail to find it.
    Under pytest-xdist it also gives the worker its own block of ports (``use_port_block``).
    """
    from spark_jobs.common.session import submit_flags

    from .support import spark_submit_opts

    os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_submit_opts())

    flags = submit_flags(master="local[2]")  # every JVM the tests launch runs a local master
    # pyspark splits it with shlex: a value with spaces (the JVM options) must be quoted.
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", shlex.join([*flags, "pyspark-shell"]))

    # Each pytest-xdist worker picks ports from a block of its own, so two workers starting
    # servers at once never pick the same port.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        use_port_block(int(worker[2:]), int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))


# Modules that share the Airflow home, the landing zone and the Spark Connect server of
# tests/airflow/conftest.py, and the fault run (`airflow dags test`): under pytest-xdist they run
# on one worker, so those are built and that run is made once. Every module that asks for the
# fault run or the phantom runs belongs here (tests/tools/test_suite_units.py checks it): one
# left out builds the home, the landing (with its retention DAG run), a server and the run again
# on another worker, CPU the suite's two cores lack.
# Every other module is a unit of its own; a worker's session fixtures (PostgreSQL, the Spark
# session, the S3 server) serve every unit it runs.
SHARED_UNITS = {
    "airflow fault run": (
        "tests/airflow/test_e2e.py",
        "tests/airflow/test_alerts_e2e.py",
        "tests/airflow/test_ui_browser.py",
        "tests/airflow/test_phantom.py",
        "tests/airflow/test_failed_run.py",
        "tests/airflow/test_lineage.py",
    ),
}
# Modules whose module-scoped world is built once per storage (``places.STORAGES``): each
# storage is a unit of its own, so the two worlds are built on two workers at once.
BY_STORAGE = ("tests/spark/test_crash.py", "tests/spark/test_incremental.py")
# The longest units start first (measured), so no long one is left for the end.
LONG_UNITS = (
    "tests/airflow/test_live_schedule.py",
    "airflow fault run",
    "tests/airflow/test_landing_retention.py",
    "tests/e2e/test_four_machines.py",
    "tests/spark/test_landing_layout.py",
    "tests/e2e/test_credentials.py",
    "tests/airflow/test_clean_install.py",
    "tests/spark/test_crash.py[s3]",
    "tests/spark/test_incremental.py[s3]",
    "tests/spark/test_crash.py[file]",
    "tests/spark/test_incremental.py[file]",
    "tests/airflow/test_operations.py",
)


# After LONG_UNITS, the units of these folders (a JVM, Airflow or a stack of processes each: tens
# of seconds to minutes a module) go before the rest (a pure or PostgreSQL module takes seconds),
# so the queue ends with its shortest units and the three workers finish together.
HEAVY_FOLDERS = ("tests/airflow/", "tests/e2e/", "tests/spark/", "tests/compose/")


def unit_order(units: list[str]) -> list[str]:
    """The order units are handed out in: LONG_UNITS as listed, then the heavy folders' units,
    then the rest, each group in its given order (xdist's: most tests first). Pure."""
    rank = {unit: i for i, unit in enumerate(LONG_UNITS)}

    def key(unit: str) -> tuple[int, int]:
        if unit in rank:
            return (0, rank[unit])
        return (1, 0) if unit.startswith(HEAVY_FOLDERS) else (2, 0)

    return sorted(units, key=key)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under ``pytest -n N``: its shared unit, or its module
    and storage, or else its module (so a module's fixtures are built once, on one worker)."""
    module = nodeid.split("::", 1)[0]
    for unit, modules in SHARED_UNITS.items():
        if module in modules:
            return unit
    if module in BY_STORAGE and nodeid.endswith("]"):
        return f"{module}[{nodeid.rsplit('[', 1)[1]}"
    return module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``pytest -n 3`` runs the suite on three workers. xdist's ``loadgroup`` cannot be used (its
    marks are lost under pytest 9, which derives node ids), so the scheduler is xdist's
    per-scope one with our units, in ``unit_order``."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:
                units = unit_order(list(self.workqueue))
                queue = self.workqueue.copy()
                self.workqueue.clear()
                self.workqueue.update((u, queue[u]) for u in units)
                self._ordered = True
            super()._assign_work_unit(node)

    return UnitScheduling(config, log)


@pytest.fixture(scope="session")
def pg_cluster():
    base = Path(tempfile.mkdtemp(prefix="auditsync-test-pg-"))
    cluster = EmbeddedPostgres(base, free_port())
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


TEST_BUCKET = "auditsync-test"


@pytest.fixture(scope="session")
def object_store(tmp_path_factory):
    """ONE real S3 server (S3Proxy) for the whole test session, with the bucket
    ``auditsync-test``; its endpoint and keys are this process's standard AWS variables, so
    every client (pyarrow, Spark's s3a, pyiceberg) finds it as a user's would."""
    from watch_service.tools.objectstore import ObjectStore

    # The test JVMs' options (C1-only JIT, serial collector) halve the server's CPU: 0.8-0.9
    # against 1.6-1.7 CPU-s to start, 3.4-4.1 against 7.4-8.3 for 600 rounds of small writes,
    # reads and listings.
    store = ObjectStore(
        tmp_path_factory.mktemp("s3"), jvm_options=tuple(TEST_JVM_OPTIONS.split())
    ).start(buckets=(TEST_BUCKET,))
    saved = {k: os.environ.get(k) for k in store.config.environ()}
    os.environ.update(store.config.environ())
    try:
        yield store
    finally:
        store.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def pg_url(pg_cluster) -> str:
    migrate(pg_cluster.url)
    return pg_cluster.url


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory) -> Settings:
    return Settings(local_dir=tmp_path_factory.mktemp("local"), retention_interval_s=3600)


@pytest.fixture
async def db(pg_url):
    """An autocommit connection to the session's database."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
async def pool(pg_url):
    """A small autocommit connection pool on the session's database (what an app's is)."""
    async with AsyncConnectionPool(
        pg_url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True}
    ) as pool:
        yield pool


@pytest.fixture
def topic_name() -> str:
    return unique("t")


@pytest.fixture(scope="session")
async def service(pg_url, base_settings):
    """The shared dev-mode service (no keys)."""
    svc = await InProcessService(base_settings, pg_url).start()
    yield svc
    await svc.stop()


@pytest.fixture
async def make_service(pg_url, base_settings):
    """Start extra in-process services with changed settings; all stopped after the test."""
    started = []

    async def make(**changes) -> InProcessService:
        svc = await InProcessService(dataclasses.replace(base_settings, **changes), pg_url).start()
        started.append(svc)
        return svc

    yield make
    for svc in started:
        await svc.stop()


@pytest.fixture(scope="session")
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture(scope="session")
def restorable(pg_url, tmp_path_factory):
    """A database of its own whose source tables a test may restore to an earlier dump."""
    from .restore import RestorableDatabase

    db = RestorableDatabase(pg_url, "auditsync_restore", tmp_path_factory.mktemp("dumps"))
    yield db.create()
    db.drop()


@pytest.fixture(scope="session")
async def restore_service(restorable, base_settings):
    """The dev-mode service on the restorable database."""
    svc = await InProcessService(base_settings, restorable.url).start()
    yield svc
    await svc.stop()


@pytest.fixture(params=["local"])
def landing_location(request, tmp_path):
    """A fresh, empty landing zone root (a ``Storage``): a local folder, or (with
    ``ON_BOTH_STORAGES`` / ``ON_S3`` from ``support``) a fresh ``s3://TEST_BUCKET/<unique>``
    prefix on the session's object store."""
    from watch_service.storage import Storage

    if request.param == "s3":
        store = request.getfixturevalue("object_store")
        return Storage.at(f"s3://{TEST_BUCKET}/{unique('landing')}", store.config)
    return Storage.at(tmp_path / "landing")
