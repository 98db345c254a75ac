"""The project's own local PostgreSQL cluster: the machine's binaries, our data folder.

``EmbeddedPostgres(base_dir, port)`` owns ``base_dir/{data,run,postgres.log}``. As root the
server must run as an unprivileged user (initdb refuses root), so every server command goes
through ``runuser -u postgres``. Loopback only, ``wal_level=logical``,
``track_commit_timestamp=on``. Used by the CLI (``auditsync db …``) and the test session.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

from watch_service.protocol.errors import AuditsyncError

DB_NAME = "auditsync"
SUPERUSER = "postgres"
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "logical",
    "track_commit_timestamp": "on",
    "max_connections": "300",
    "shared_buffers": "256MB",
    "max_wal_size": "2GB",
    "fsync": "on",
    "log_min_messages": "warning",
}


class EmbeddedPgError(AuditsyncError):
    """The embedded cluster cannot be found, initialised or started; the message says why."""


def find_bindir() -> Path:
    """The directory holding initdb/pg_ctl: ``pg_config --bindir`` first, else the newest
    ``/usr/lib/postgresql/*/bin``."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(Path(p) for p in versions)
    for path in candidates:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    raise EmbeddedPgError(
        "no PostgreSQL server binaries found (looked for initdb and pg_ctl via pg_config and in "
        "/usr/lib/postgresql/*/bin). Install them, e.g. `apt-get install postgresql-15`, "
        "or set DATABASE_URL to an existing server."
    )


class EmbeddedPostgres:
    def __init__(self, base_dir: Path, port: int, run_as: str | None = None) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.port = port
        self.data_dir = self.base_dir / "data"
        self.run_dir = self.base_dir / "run"
        self.log_file = self.base_dir / "postgres.log"
        if run_as is None and os.geteuid() == 0:
            run_as = "postgres"
        self.run_as = run_as

    # -- public -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DB_NAME}"

    @property
    def pid(self) -> int | None:
        """The postmaster's PID while it runs, else None."""
        return self._server_pid()

    def status(self) -> str:
        """``running`` / ``stopped`` / ``absent`` (no cluster initialised)."""
        if not (self.data_dir / "PG_VERSION").exists():
            return "absent"
        return "running" if self._server_pid() else "stopped"

    def start(self) -> str:
        """Initialise if needed and start; idempotent. Returns the connection URL."""
        bindir = find_bindir()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bindir)
        if self._server_pid() is None:
            self._remove_stale_pidfile()
            self._run(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    f"-p {self.port} -k {self.run_dir}",
                    "start",
                ],
                what="pg_ctl start",
            )
        self._ensure_database(bindir)
        return self.url

    def stop(self) -> bool:
        """Stop if running (fast mode). Returns whether a server was stopped."""
        if self._server_pid() is None:
            self._remove_stale_pidfile()
            return False
        bindir = find_bindir()
        self._run(
            [str(bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
            what="pg_ctl stop",
        )
        return True

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- internals ---------------------------------------------------------------------------
    def _run(self, argv: list[str], what: str) -> str:
        if self.run_as:
            argv = ["runuser", "-u", self.run_as, "--", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = ""
            if self.log_file.exists():
                tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-15:])
            raise EmbeddedPgError(
                f"{what} failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"  # noqa: E501
                + (f"\n--- {self.log_file} ---\n{tail}" if tail else "")
            )
        return proc.stdout

    def _check_reachable(self, run_as: str) -> None:
        """As root the server runs as ``run_as``, who must be able to reach base_dir."""
        for parent in reversed(self.base_dir.parents):
            probe = subprocess.run(
                ["runuser", "-u", run_as, "--", "test", "-x", str(parent)], capture_output=True
            )
            if probe.returncode != 0:
                raise EmbeddedPgError(
                    f"user {run_as!r} (who runs the embedded server, since initdb refuses "
                    f"root) cannot enter {parent}; put the project (or AUDITSYNC_HOME) under a "
                    f"directory others may traverse, or `chmod o+x {parent}`"
                )

    def _prepare_dirs(self, data: bool = True) -> None:
        """The base, run (and, unless a tool will make it, data) folders, owned by the server's
        user when it is not us."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(exist_ok=True)
        if data:
            self.data_dir.mkdir(exist_ok=True)
        if self.run_as:
            try:
                user = pwd.getpwnam(self.run_as)
            except KeyError:
                raise EmbeddedPgError(
                    f"running as root, the server must run as an unprivileged user, but user "
                    f"{self.run_as!r} does not exist (create it: `useradd -r {self.run_as}`)"
                ) from None
            for path in (self.base_dir, self.run_dir, *([self.data_dir] if data else [])):
                os.chown(path, user.pw_uid, user.pw_gid)
            if data:
                self.data_dir.chmod(0o700)
            self._check_reachable(self.run_as)

    def _initdb(self, bindir: Path) -> None:
        self._prepare_dirs()
        self._run(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-instructions",
            ],
            what="initdb",
        )
        conf = "\n".join(f"{k} = {v}" for k, v in SERVER_SETTINGS.items())
        conf_path = self.data_dir / "postgresql.auto.conf"
        with conf_path.open("a") as fh:
            fh.write("\n# auditsync embedded cluster\n" + conf + "\n")

    def _server_pid(self) -> int | None:
        pidfile = self.data_dir / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if b"postgres" in cmdline else None

    def _remove_stale_pidfile(self) -> None:
        pidfile = self.data_dir / "postmaster.pid"
        if pidfile.exists() and self._server_pid() is None:
            pidfile.unlink()

    def _ensure_database(self, bindir: Path) -> None:
        psql = bindir / "psql"
        if not psql.exists():
            psql = Path(shutil.which("psql") or "psql")
        base = [
            str(psql),
            "-h",
            str(self.run_dir),
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-d",
            "postgres",
            "-Atqc",
        ]
        for _ in range(50):
            try:
                out = self._run(
                    [*base, f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}'"], what="psql"
                )
                break
            except EmbeddedPgError:
                time.sleep(0.1)  # the server is still accepting its first connections
        else:
            raise EmbeddedPgError(
                f"server on port {self.port} does not accept connections; see {self.log_file}"
            )
        if out.strip() != "1":
            self._run([*base, f"CREATE DATABASE {DB_NAME}"], what="create database")
