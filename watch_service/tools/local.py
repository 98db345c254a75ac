"""Running the service locally, for the tests, the benchmarks and the demo: a free loopback port,
waiting for a port to listen, and ``auditsync serve`` as a child process stopped by its PID.

One home for what used to be written in each of them, so a change to how the service starts
(flags, environment, readiness) is made once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from watch_service.settings import PROJECT_ROOT

# free_port's ports lie below the kernel's ephemeral range (``ip_local_port_range``, 32768 and up
# by default). A port that bind(0) hands out comes from that range, and between the moment it is
# chosen and the moment the server started on it binds it, the kernel may give the same port to
# any outgoing connection as its source port: with Spark, PostgreSQL clients and HTTP clients busy
# on the machine it did (a test cluster's postmaster found "Address already in use"). Below the
# range no outgoing connection takes a port.
PORTS_FLOOR = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_ports_lock = threading.Lock()
_ports_block: tuple[int, int] | None = None  # [low, high) this process draws from
_ports_next: int | None = None
_ports_pid = 0  # the process whose walk _ports_next is: a forked child starts a walk of its own


@functools.cache  # a kernel setting: read once, not on every pick
def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def use_port_block(index: int, count: int) -> None:
    """Draw this process's ports from the ``index``-th of ``count`` equal slices of free_port's
    range, so processes that pick ports at once (the test workers) never pick the same one."""
    global _ports_block, _ports_next
    low, high = PORTS_FLOOR, _ephemeral_low()
    if not 0 <= index < count or high - low < count:
        raise ValueError(f"no port block {index} of {count} in [{low}, {high})")
    size = (high - low) // count
    with _ports_lock:
        _ports_block = (low + index * size, low + (index + 1) * size)
        _ports_next = None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to right now, below the ephemeral range (see
    PORTS_FLOOR). Each process walks its block (the whole range unless use_port_block narrowed
    it) upwards from a random start, so a port it just handed out is not handed out again before
    the walk comes round, and two processes walking at once rarely meet."""
    global _ports_next, _ports_pid
    with _ports_lock:
        low, high = _ports_block or (PORTS_FLOOR, _ephemeral_low())
        if high - low < 64:  # a kernel configured with (nearly) no room below its range
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                return int(s.getsockname()[1])
        if _ports_next is None or not low <= _ports_next < high or _ports_pid != os.getpid():
            _ports_next, _ports_pid = random.randrange(low, high), os.getpid()
        for _ in range(high - low):
            port, _ports_next = _ports_next, low + (_ports_next + 1 - low) % (high - low)
            if _bindable(port):
                return port
    raise OSError(f"no free TCP port on 127.0.0.1 in [{low}, {high})")


def wait_for_port(
    port: int, timeout: float, proc: subprocess.Popen | None = None, what: str = "service"
) -> None:
    """Return once 127.0.0.1:``port`` accepts a connection; raise RuntimeError when ``proc``
    exits first or ``timeout`` seconds pass. A child process gives no other signal that it
    listens, so this polls the socket (every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:.0f}s")


def serve_command(port: int, workers: int | None = None) -> list[str]:
    """``auditsync serve`` on ``port`` with this interpreter; the schema is migrated beforehand.
    ``workers``: ``--workers`` (None: the service's default, one per core)."""
    cmd = [sys.executable, "-m", "watch_service.cli", "serve", "--no-migrate", "--port", str(port)]
    return cmd if workers is None else [*cmd, "--workers", str(workers)]


class ServiceProcess:
    """``auditsync serve`` as its own OS process, stopped by its PID.

    ``env`` is added to this process's environment (a value of None removes the variable);
    output goes to ``log_path`` (appended) or nowhere.
    """

    def __init__(
        self,
        db_url: str,
        port: int | None = None,
        env: Mapping[str, str | None] | None = None,
        log_path: Path | None = None,
        preexec_fn: Callable[[], None] | None = None,
        workers: int = 1,
    ) -> None:
        self.db_url = db_url
        self.port = port or free_port()
        self.extra_env = dict(env or {})
        self.log_path = log_path
        self.preexec_fn = preexec_fn
        self.workers = workers  # one process unless asked: what tests and benches mostly want
        if workers > 1 and log_path is None:
            raise ValueError("workers > 1: give a log_path, where start() sees them all listen")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the service was not started"
        return self.proc.pid

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "DATABASE_URL": self.db_url}
        for name, value in self.extra_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def spawn(self) -> ServiceProcess:
        """Start the process and return at once (``start`` also waits until it serves)."""
        if self.log_path is None:
            self.proc = self._spawn(subprocess.DEVNULL)
        else:
            with open(self.log_path, "ab") as out:  # the child keeps its own descriptor
                self.proc = self._spawn(out)
        return self

    def start(self, timeout: float = 20.0) -> ServiceProcess:
        self.spawn()
        try:
            deadline = time.monotonic() + timeout
            wait_for_port(self.port, timeout, self.proc, what=f"service (log: {self.log_path})")
            if self.workers > 1:
                self._wait_all_listening(deadline)
        except RuntimeError:
            self.stop()
            raise
        return self

    def _wait_all_listening(self, deadline: float) -> None:
        """Until the supervisor logs that every worker listens (its port answers as soon as
        one does)."""
        from watch_service.serve import all_listening

        assert self.log_path is not None and self.proc is not None
        marker = all_listening(self.workers)
        while marker not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"service exited with {self.proc.returncode} (log: {self.log_path})"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"not all {self.workers} workers listen (log: {self.log_path})")
            time.sleep(0.05)

    def _spawn(self, out: IO[bytes] | int) -> subprocess.Popen:
        return subprocess.Popen(
            serve_command(self.port, self.workers),
            env=self.environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            preexec_fn=self.preexec_fn,
        )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Signal the process and wait for it (SIGKILL after ``timeout``); its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
