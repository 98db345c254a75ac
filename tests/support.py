"""Test support shared by every layer: waiting on conditions, one-call requests and the
in-process service. Free ports and the service as a separate OS process (for restarts and
second replicas) live in ``watch_service.tools.local``, shared with bench/ and the demo, and are
re-exported here for the tests."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import select
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from watch_service.app import create_app
from watch_service.settings import Settings
from watch_service.tools.local import ServiceProcess, free_port
from watch_service.web.serving import ContractRunner

__all__ = [
    "ON_BOTH_STORAGES",
    "ON_S3",
    "ROOT",
    "S3",
    "InProcessService",
    "ServiceProcess",
    "call",
    "free_port",
    "unique",
    "wait_for",
]

ROOT = Path(__file__).resolve().parent.parent


# ``landing_location`` on the session's object store (marked ``s3``), for parametrize lists.
S3 = pytest.param("s3", marks=pytest.mark.s3, id="s3")
# Runs a test with the ``landing_location`` fixture on a local folder and on the object store.
ON_BOTH_STORAGES = pytest.mark.parametrize("landing_location", ["local", S3], indirect=True)
ON_S3 = pytest.mark.parametrize("landing_location", [S3], indirect=True)


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def call(http, method: str, url: str, **kw) -> tuple[int, dict]:
    """One request; (status, JSON body)."""
    async with http.request(method, url, **kw) as r:
        return r.status, await r.json()


async def wait_for(
    predicate: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


class InProcessService:
    """The real aiohttp app on a real loopback socket, in the test's event loop."""

    def __init__(self, settings: Settings, db_url: str) -> None:
        self.app = create_app(settings, db_url)
        self.runner = ContractRunner(self.app, settings)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> InProcessService:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        await self.runner.cleanup()


async def run_cli(*argv: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``auditsync ARGV`` as its own process with ``env`` added; (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "watch_service.cli",
        *argv,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


# A test JVM: C1-only JIT (about half the CPU of a short one), and the serial collector (heaps
# of 1 GB at most on two cores: 166 against 174 CPU-s with G1 for the modules named below).
# C1-only JIT sizes the code cache at 48 MB, and a long-lived session with generated code fills
# it (55 MB after one minute of test_incremental.py): below 10 % free the JVM's sweeper flushes
# and the compiler compiles again, on every allocation of compiled code. 256 MB, the tiered
# JIT's size, is address space until used (docs/testing.md).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m"
# What every Spark JVM the tests start (their sessions, the Spark Connect servers, the steps)
# runs with: on tiny tables compiling is the cost, not running (C1-only stays cheaper even for
# the long-lived sessions: 175 CPU-s against 224 with tiered JIT for the rewind, pipeline and
# ranges modules). Two shuffle partitions and no adaptive execution, as the shared session always
# had, for the Spark Connect servers and spark-submits too: with Spark's 200, a DAG run's
# backfill_audit_log took 15.6 s, with 2 it takes 0.9 s. Expressions are interpreted, not
# compiled (codegen's factory mode): the rewind, pipeline and ranges modules took 160 CPU-s
# against 184 and 196 with generated code.
SPARK_DEFAULTS = {
    "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.sql.codegen.wholeStage": "false",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def spark_submit_opts() -> str:
    """``SPARK_SUBMIT_OPTS`` for every JVM ``spark-submit`` starts (pyspark's sessions are
    started by it too): ``TEST_JVM_OPTIONS``, and ``SPARK_DEFAULTS`` as system properties, which
    Spark reads below every ``--conf`` as it reads ``spark-defaults.conf``. Not a
    ``SPARK_CONF_DIR``: the launcher puts that folder on the class path, and a class path with a
    non-empty folder on it cannot map the class archive (``spark_jobs.common.jvm_archive``).
    A cluster's executors (the phantom run's) are given the archive too: their class path also
    starts with the pinned jars (``AUDITSYNC_SPARK_WORKER_JARS``)."""
    from spark_jobs.common import jvm_archive
    from spark_jobs.common.session import classpath

    settings = dict(SPARK_DEFAULTS)
    archive = jvm_archive.options(classpath())
    if archive:
        settings["spark.executor.defaultJavaOptions"] = archive
    props = [f"-D{key}={value}" for key, value in settings.items()]
    return shlex.join([*TEST_JVM_OPTIONS.split(), *props])


def stop(proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """SIGTERM a process the test started (SIGKILL after ``timeout``); its exit status. A
    process that already ended is left alone."""
    return stop_all([proc], timeout)[0]


def stop_all(procs: list[subprocess.Popen], timeout: float = 60.0) -> list[int]:
    """``stop`` for several at once: SIGTERM to each, then wait for each, so they shut down
    side by side (a live Airflow's daemons took about 30 s one after the other); SIGKILL to
    those still running ``timeout`` seconds after the SIGTERMs.

    Every process below them (their descendants, found before the SIGTERMs) is waited for as
    well, at most ``ORPHAN_GRACE_S`` past that, and then killed: the scheduler's fork server
    (``[scheduler] mp_start_method``) and ``multiprocessing``'s resource tracker outlive it by a
    moment, and with them go the LocalExecutor's workers and every task they ran; one kept alive
    by a pipe some other descendant holds would outlive the test run. Those that become this
    process's children meanwhile are reaped: left to init, their CPU would be missing from
    ``RUSAGE_CHILDREN`` (``make test``'s CPU line) and from ``tests/unit_cost.py``'s table."""
    left = _pidfds([pid for proc in procs if proc.poll() is None for pid in descendants(proc.pid)])
    _adopt_orphans(True)
    try:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        statuses = []
        for proc in procs:
            try:
                statuses.append(proc.wait(max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                proc.kill()
                statuses.append(proc.wait())
        grace_ends = min(deadline, time.monotonic() + ORPHAN_GRACE_S)
        for pid, fd in left.items():
            end_descendant(pid, fd, max(0.0, grace_ends - time.monotonic()))
    finally:
        _adopt_orphans(False)
    return statuses


ORPHAN_GRACE_S = 10.0  # how long a stopped process's descendants may take to follow it


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` now (``/proc``), parents before their children."""
    # Here, not at the top: the module is a pytest plugin, imported (and assert-rewritten) by
    # pytest itself after this one.
    from tests.unit_cost import below, proc_stats

    return below(pid, proc_stats())


def _pidfds(pids: list[int]) -> dict[int, int]:
    """A pidfd for each of ``pids`` still running: signals and waits through it cannot reach
    another process that reused the pid."""
    fds = {}
    for pid in pids:
        with contextlib.suppress(OSError):  # it ended already
            fds[pid] = os.pidfd_open(pid)
    return fds


def end_descendant(pid: int, fd: int, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the process of pidfd ``fd`` to end, SIGKILL it if it
    has not, and reap it if it became this process's child. Closes ``fd``."""
    try:
        if not select.select([fd], [], [], timeout)[0]:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            select.select([fd], [], [], 10.0)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    finally:
        os.close(fd)


def _adopt_orphans(on: bool) -> None:
    """Make this process the one a descendant's orphans are handed to (``PR_SET_CHILD_SUBREAPER``),
    or stop being it."""
    ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0)
