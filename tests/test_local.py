"""watch_service.tools.local: the helpers tests, benchmarks and the demo start the service with."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from watch_service.tools.local import ServiceProcess, free_port, serve_command, wait_for_port


@pytest.mark.unit
def test_the_environment_adds_and_removes_variables(monkeypatch) -> None:
    monkeypatch.setenv("AUDITSYNC_KEYS_FILE", "/somewhere/keys.toml")
    changes = {"AUDITSYNC_KEYS_FILE": None, "AUDITSYNC_POOL_MAX": "20"}
    env = ServiceProcess("postgresql://x/y", port=1, env=changes).environment()
    assert env["DATABASE_URL"] == "postgresql://x/y"
    assert env["AUDITSYNC_POOL_MAX"] == "20"
    assert "AUDITSYNC_KEYS_FILE" not in env


@pytest.mark.unit
def test_the_command_serves_on_the_port_without_migrating() -> None:
    assert serve_command(8401)[1:] == [
        "-m",
        "watch_service.cli",
        "serve",
        "--no-migrate",
        "--port",
        "8401",
    ]


@pytest.mark.e2e
def test_wait_for_port_sees_a_listener_and_a_dead_child() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        wait_for_port(listener.getsockname()[1], timeout=5)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(RuntimeError, match="exited with 0"):
        wait_for_port(free_port(), timeout=5, proc=dead, what="child")
