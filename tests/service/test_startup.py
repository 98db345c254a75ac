"""Start-up mistakes of ``auditsync serve``: each is exit code 2 and one line on stderr naming
the setting, never a traceback or a hang, and nothing is left running (the process group is
gone). The good path logs "serving on" only once every listener is bound, and Ctrl-C says what
it stopped and what it left running."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import pytest

from tests.support import ROOT, free_port
from watch_service.cli import main

pytestmark = pytest.mark.e2e

TIMEOUT_S = 30


async def start(*argv: str, env: dict[str, str], code: str | None = None):
    """``auditsync ARGV`` (or ``python -c CODE ARGV``) in its own process group."""
    head = ["-c", code] if code else ["-m", "watch_service.cli"]
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *head,
        *argv,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )


def group_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def refused(*argv: str, env: dict[str, str], code: str | None = None) -> str:
    """Run a mistaken start-up; assert exit 2, one stderr line, no traceback, nothing left."""
    proc = await start(*argv, env=env, code=code)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    text = err.decode()
    assert proc.returncode == 2, (proc.returncode, text)
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    assert text.startswith("auditsync: ")
    assert group_gone(proc.pid)
    return text.strip()


def serve_env(pg_url: str, **extra: str) -> dict[str, str]:
    return {"DATABASE_URL": pg_url, **extra}


def refused_in_process(capsys, *argv: str, env: dict[str, str]) -> str:
    """A mistake caught before anything starts, through ``main`` itself: exit 2, one line."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    return err.strip()


@pytest.mark.unit
def test_port_zero_names_its_variable(capsys):
    line = refused_in_process(capsys, "serve", env={"AUDITSYNC_PORT": "0"})
    assert line == "auditsync: AUDITSYNC_PORT: a port must be within 1..65535, got 0"


@pytest.mark.unit
def test_port_out_of_range_flag(capsys):
    line = refused_in_process(capsys, "serve", "--port", "99999", env={})
    assert line == "auditsync: --port: a port must be within 1..65535, got 99999"


@pytest.mark.unit
@pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
def test_non_finite_float_refused(capsys, raw):
    line = refused_in_process(capsys, "serve", env={"AUDITSYNC_WRITE_TIMEOUT_S": raw})
    assert line == f"auditsync: AUDITSYNC_WRITE_TIMEOUT_S: expected a finite number, got {raw!r}"


async def test_malformed_database_url_is_masked():
    # as its own process: the whole path from the environment to the exit status
    line = await refused("serve", env={"DATABASE_URL": "user:s3cret@db.example/x"})
    assert line.startswith("auditsync: DATABASE_URL: cannot parse")
    assert "s3cret" not in line


async def test_http_port_in_use(pg_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = await refused("serve", "--no-migrate", "--port", str(port), env=serve_env(pg_url))
    assert line == (
        f"auditsync: cannot listen on 127.0.0.1:{port} (AUDITSYNC_PORT / --port): "
        "the port is already in use"
    )


async def test_grpc_port_in_use(pg_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = await refused(
            "serve",
            "--no-migrate",
            "--port",
            str(free_port()),
            "--grpc-port",
            str(port),
            env=serve_env(pg_url),
        )
    assert line == (
        f"auditsync: cannot listen on 127.0.0.1:{port} (AUDITSYNC_GRPC_PORT / --grpc-port): "
        "the port is already in use"
    )


async def test_grpc_without_the_authz_extra(pg_url):
    # The extra's packages made unimportable in this process only, as if never installed.
    code = (
        "import sys; sys.modules['authzed'] = None; sys.argv[0] = 'auditsync'; "
        "from watch_service.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    line = await refused(
        "serve", "--no-migrate", "--grpc-port", str(free_port()), env=serve_env(pg_url), code=code
    )
    assert line.endswith("needs authzed: pip install 'auditsync[authz]'")


@pytest.mark.unit
def test_db_status_masks_the_password(capsys, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:s3cret@h:5/db")
    assert main(["db", "status"]) == 0
    assert capsys.readouterr().out == "external: postgresql://u:****@h:5/db\n"


async def test_serving_logged_once_bound_and_ctrl_c_says_what_it_left(pg_url):
    port, grpc_port = free_port(), free_port()
    proc = await start(
        "serve",
        "--no-migrate",
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
        env=serve_env("postgresql://auditsync:pw@" + pg_url.split("@", 1)[1]),
    )
    assert proc.stderr is not None
    try:
        lines = []
        while True:
            line = (await asyncio.wait_for(proc.stderr.readline(), TIMEOUT_S)).decode()
            assert line, "".join(lines)
            lines.append(line)
            if "serving on" in line:
                break
        # Both listeners are bound by the time it says so.
        for p in (port, grpc_port):
            _, writer = await asyncio.open_connection("127.0.0.1", p)
            writer.close()
            await writer.wait_closed()
        proc.send_signal(signal.SIGINT)
        rest = (await asyncio.wait_for(proc.stderr.read(), TIMEOUT_S)).decode()
        assert await asyncio.wait_for(proc.wait(), TIMEOUT_S) == 0
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    last = rest.strip().splitlines()[-1]
    assert last.startswith(f"auditsync: stopped the service on http://127.0.0.1:{port}; ")
    assert "was not started by it" in last and "pw@" not in last and "****" in last
    assert "Traceback" not in rest
