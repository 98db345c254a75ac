"""An asynchronous streaming replica of an embedded cluster, and the failover that loses what
it had not replayed: for the failover drill (``tests/spark/test_failover.py``).

``Standby.clone(primary, base_dir, port)`` takes a base backup of a running
``EmbeddedPostgres`` (``pg_basebackup -R``: it writes ``standby.signal`` and the
``primary_conninfo`` the server streams with) and starts it as a hot standby on its own
loopback port. ``hold_back()`` stops its WAL receiver (``primary_conninfo`` emptied and the
configuration reloaded), so whatever the primary commits from then on is acknowledged to its
writers and never reaches the standby; ``kill(primary)`` ends the primary's postmaster with
SIGKILL (a crash: no shutdown checkpoint, nothing more sent); ``promote()`` makes the standby
the new primary. Every server command runs as the cluster's unprivileged user, as in
``store/cluster``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg

from watch_service.store.cluster import EmbeddedPgError, EmbeddedPostgres, find_bindir

REPLAYED = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
RECEIVING = "SELECT count(*) FROM pg_stat_wal_receiver"


def _wait(check, timeout: float, what: str) -> None:
    """Poll ``check()`` (a query on a live server: nothing else tells us) until true."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise EmbeddedPgError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class Standby(EmbeddedPostgres):
    """A hot standby streaming from a primary on loopback."""

    @classmethod
    def clone(cls, primary: EmbeddedPostgres, base_dir: Path, port: int) -> Standby:
        """A base backup of the running ``primary`` in ``base_dir/data``, started."""
        standby = cls(base_dir, port, primary.run_as)
        standby._prepare_dirs(data=False)  # pg_basebackup makes the data folder
        standby._run(
            [
                str(find_bindir() / "pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                str(primary.port),
                "-U",
                "postgres",
                "-D",
                str(standby.data_dir),
                "-R",  # standby.signal + primary_conninfo
                "-X",
                "stream",
                "-c",
                "fast",
            ],
            what="pg_basebackup",
        )
        standby.start()
        return standby

    def wait_replayed(self, primary: EmbeddedPostgres, timeout: float = 30.0) -> str:
        """Until the standby has replayed everything the primary has written now; its LSN."""
        with psycopg.connect(primary.url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        lsn: str = row[0]
        with psycopg.connect(self.url, autocommit=True) as conn:
            _wait(
                lambda: bool(conn.execute(REPLAYED, (lsn,)).fetchone()[0]),  # type: ignore[index]
                timeout,
                f"the standby on port {self.port} to replay {lsn}",
            )
        return lsn

    def hold_back(self, timeout: float = 30.0) -> None:
        """Stop receiving WAL: what the primary commits from now on never arrives here."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")
            _wait(
                lambda: conn.execute(RECEIVING).fetchone()[0] == 0,  # type: ignore[index]
                timeout,
                f"the WAL receiver of the standby on port {self.port} to stop",
            )

    def promote(self) -> None:
        """The standby becomes a primary that accepts writes (``pg_ctl promote -w``)."""
        self._run(
            [str(find_bindir() / "pg_ctl"), "-D", str(self.data_dir), "-w", "promote"],
            what="pg_ctl promote",
        )


def kill(cluster: EmbeddedPostgres, timeout: float = 30.0) -> int:
    """SIGKILL the cluster's postmaster, as a crashed machine would leave it; its PID. Returns
    once the postmaster is gone (its backends end on their own when they notice)."""
    pid = cluster.pid
    if pid is None:
        raise EmbeddedPgError(f"no server runs on port {cluster.port}")
    os.kill(pid, signal.SIGKILL)
    _wait(lambda: cluster.pid is None, timeout, f"postmaster {pid} to end")
    return pid
