"""watch_service.tools.local: the helpers tests, benchmarks and the demo start the service with."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from watch_service.tools import local
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


@pytest.fixture
def own_ports(monkeypatch):
    """free_port's walk as this test leaves it is undone afterwards (the worker's block stays)."""
    monkeypatch.setattr(local, "_ports_block", local._ports_block)
    monkeypatch.setattr(local, "_ports_next", local._ports_next)


@pytest.mark.unit
def test_free_ports_lie_below_the_ephemeral_range_and_do_not_repeat(own_ports) -> None:
    ephemeral_low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    local._ports_block = None  # the whole range
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == 200
    assert all(local.PORTS_FLOOR <= p < ephemeral_low for p in ports)


@pytest.mark.unit
def test_free_port_passes_over_a_port_in_use(own_ports) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        local._ports_block, local._ports_next = (port, port + 64), port
        got = free_port()
        assert port < got < port + 64


@pytest.mark.unit
def test_port_blocks_split_the_range_without_overlap(own_ports) -> None:
    drawn = []
    for index in range(3):
        local.use_port_block(index, 3)
        low, high = local._ports_block
        ports = {free_port() for _ in range(20)}
        assert all(low <= p < high for p in ports)
        drawn.append(ports)
    assert not (drawn[0] & drawn[1] or drawn[1] & drawn[2] or drawn[0] & drawn[2])
    with pytest.raises(ValueError, match="no port block 3 of 3"):
        local.use_port_block(3, 3)


@pytest.mark.unit
def test_a_test_worker_draws_ports_from_its_own_block() -> None:
    """tests/conftest.py gives each pytest-xdist worker its block; a plain run has the range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        assert local._ports_block is None
        return
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    size = (local._ephemeral_low() - local.PORTS_FLOOR) // count
    low = local.PORTS_FLOOR + int(worker.removeprefix("gw")) * size
    assert local._ports_block == (low, low + size)


@pytest.mark.unit
def test_a_forked_child_walks_from_a_start_of_its_own(own_ports, monkeypatch) -> None:
    """A child forked mid-walk would otherwise hand out the very ports its parent hands out
    next."""
    low = free_port()
    local._ports_block, local._ports_next = (low, low + 64), low
    monkeypatch.setattr(local.random, "randrange", lambda a, b: a + 32)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one port, written to the pipe, then gone
        try:
            os.write(write, str(free_port()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = int(pipe.read())
    os.waitpid(pid, 0)
    assert low + 32 <= child < low + 64  # its own start, not the parent's next port
    assert free_port() < low + 32  # the parent's walk goes on where it was
