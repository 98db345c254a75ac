"""The project's own PostgreSQL cluster: idempotent start, status values, a stale pid file,
the server settings it promises (logical WAL, commit timestamps, loopback only), the CLI's
``db`` commands, and a clear error when no server binaries exist."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.support import ROOT, free_port
from watch_service.store import cluster as embedded_pg
from watch_service.store.cluster import EmbeddedPgError, EmbeddedPostgres, find_bindir

pytestmark = pytest.mark.pg


@pytest.fixture(scope="module")
def cluster():
    """A throwaway cluster laid out like ``auditsync db`` would (``<home>/pg``)."""
    home = Path(tempfile.mkdtemp(prefix="auditsync-test-embedded-"))
    home.chmod(0o755)  # as root the server runs as "postgres", which must reach <home>/pg
    pg = EmbeddedPostgres(home / "pg", free_port())
    assert pg.status() == "absent"
    pg.start()
    yield pg
    pg.destroy()
    assert not home.joinpath("pg").exists()
    shutil.rmtree(home, ignore_errors=True)


def postmaster_pid(pg: EmbeddedPostgres) -> int:
    return int((pg.data_dir / "postmaster.pid").read_text().splitlines()[0])


def test_start_is_idempotent(cluster):
    assert cluster.status() == "running"
    pid = postmaster_pid(cluster)
    assert cluster.start() == cluster.url
    assert postmaster_pid(cluster) == pid  # the second start did not restart it
    assert cluster.url == f"postgresql://postgres@127.0.0.1:{cluster.port}/auditsync"
    with psycopg.connect(cluster.url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("auditsync",)


def test_server_settings(cluster):
    with psycopg.connect(cluster.url) as conn:
        show = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("wal_level", "track_commit_timestamp", "listen_addresses", "port")
        }
    assert show == {
        "wal_level": "logical",
        "track_commit_timestamp": "on",
        "listen_addresses": "127.0.0.1",
        "port": str(cluster.port),
    }


def test_listens_on_loopback_only(cluster):
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            addr, port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(port, 16) == cluster.port:  # 0A = LISTEN
                listening.append(addr)
    assert listening == ["0100007F"]  # 127.0.0.1, and nothing else


def test_server_runs_unprivileged(cluster):
    if os.geteuid() != 0:
        assert cluster.run_as is None
        return
    assert cluster.run_as == "postgres"
    owner = cluster.data_dir.stat().st_uid
    assert owner != 0
    status = Path(f"/proc/{postmaster_pid(cluster)}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert int(uid_line.split()[1]) == owner


def test_stop_status_and_stale_pidfile(cluster):
    assert cluster.stop() is True
    assert cluster.status() == "stopped"
    assert cluster.stop() is False  # stopping a stopped cluster is a no-op

    # A crash leaves postmaster.pid behind; its pid may be dead or reused by another program.
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        for stale_pid in (dead.pid, alive.pid):
            pidfile = cluster.data_dir / "postmaster.pid"
            pidfile.write_text(f"{stale_pid}\n{cluster.data_dir}\n0\n{cluster.port}\n")
            assert cluster.status() == "stopped"
            assert cluster.start() == cluster.url
            assert cluster.status() == "running"
            assert postmaster_pid(cluster) != stale_pid
            with psycopg.connect(cluster.url) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            cluster.stop()
    finally:
        alive.kill()
        alive.wait()
    cluster.start()


def run_cli(home: Path, port: int, *argv: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(AUDITSYNC_HOME=str(home), AUDITSYNC_PG_PORT=str(port))
    proc = subprocess.run(
        [sys.executable, "-m", "watch_service.cli", "db", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout.strip(), proc.stderr


async def test_db_cli(cluster):
    home, port = cluster.base_dir.parent, cluster.port

    def cli(*argv):
        return asyncio.to_thread(run_cli, home, port, *argv)

    assert await cli("url") == (0, cluster.url, "")
    assert (await cli("status"))[:2] == (0, "running")
    assert (await cli("stop"))[:2] == (0, "stopped")
    assert (await cli("status"))[:2] == (0, "stopped")
    assert (await cli("start"))[:2] == (0, cluster.url)
    assert cluster.status() == "running"


def test_find_bindir_finds_the_machines_binaries():
    bindir = find_bindir()
    assert (bindir / "initdb").exists() and (bindir / "pg_ctl").exists()


def test_find_bindir_without_binaries(monkeypatch):
    """Only the OS lookups are replaced: there is no pg_config on PATH and no /usr/lib tree."""
    monkeypatch.setattr(embedded_pg.shutil, "which", lambda name: None)
    monkeypatch.setattr(embedded_pg.glob, "glob", lambda pattern: [])
    with pytest.raises(EmbeddedPgError) as info:
        find_bindir()
    assert str(info.value) == (
        "no PostgreSQL server binaries found (looked for initdb and pg_ctl via pg_config and in "
        "/usr/lib/postgresql/*/bin). Install them, e.g. `apt-get install postgresql-15`, "
        "or set DATABASE_URL to an existing server."
    )
    with pytest.raises(EmbeddedPgError):
        EmbeddedPostgres(Path(tempfile.gettempdir()) / "never-created", free_port()).start()


def test_find_bindir_prefers_pg_config_then_newest_version(monkeypatch, tmp_path):
    def fake_bin(path: Path) -> Path:
        path.mkdir(parents=True)
        for name in ("initdb", "pg_ctl"):
            (path / name).touch()
        return path

    old, new, incomplete = (
        fake_bin(tmp_path / "lib/13/bin"),
        fake_bin(tmp_path / "lib/16/bin"),
        tmp_path / "lib/17/bin",
    )
    incomplete.mkdir(parents=True)  # a client-only install: no initdb
    monkeypatch.setattr(
        embedded_pg.glob, "glob", lambda pattern: [str(old), str(incomplete), str(new)]
    )
    monkeypatch.setattr(embedded_pg.shutil, "which", lambda name: None)
    assert find_bindir() == new

    config_bin = fake_bin(tmp_path / "configured/bin")
    pg_config = tmp_path / "pg_config"
    pg_config.write_text(f"#!/bin/sh\necho {config_bin}\n")
    pg_config.chmod(0o755)
    monkeypatch.setattr(embedded_pg.shutil, "which", lambda name: str(pg_config))
    assert find_bindir() == config_bin
