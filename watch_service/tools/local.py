"""Running the service locally, for the tests, the benchmarks and the demo: a free loopback port,
waiting for a port to listen, and ``auditsync serve`` as a child process stopped by its PID.

One home for what used to be written in each of them, so a change to how the service starts
(flags, environment, readiness) is made once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from watch_service.settings import PROJECT_ROOT


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
