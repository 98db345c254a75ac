"""Test support shared by every layer: free ports, waiting on conditions, the in-process
service, and the service as a separate OS process (for restarts and second replicas)."""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from watch_service.app import create_app
from watch_service.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def call(http, method: str, url: str, **kw) -> tuple[int, dict]:
    """One request; (status, JSON body)."""
    async with http.request(method, url, **kw) as r:
        return r.status, await r.json()


async def wait_for(predicate: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0,
                   what: str = "condition") -> None:
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
        self.runner = web.AppRunner(self.app, handle_signals=False)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> "InProcessService":
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        await self.runner.cleanup()


class ServiceProcess:
    """``auditsync serve`` as its own OS process, stopped by its PID."""

    def __init__(self, db_url: str, port: int | None = None, env: dict[str, str] | None = None,
                 log_path: Path | None = None) -> None:
        self.db_url = db_url
        self.port = port or free_port()
        self.extra_env = env or {}
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "ServiceProcess":
        env = {**os.environ, "DATABASE_URL": self.db_url, **self.extra_env}
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "watch_service.cli", "serve", "--no-migrate",
             "--port", str(self.port)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited with {self.proc.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"service did not listen on {self.port} within {timeout}s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
