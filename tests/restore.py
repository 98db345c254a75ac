"""A database restored the way a disaster leaves one, for the tests of a source that goes back.

A failover to a lagging replica or a restore from a backup leaves the log tables as they were
at some earlier moment: ``dump`` takes that moment (``pg_dump --data-only`` of the log and
session tables, the custom format a backup keeps), ``restore`` puts it back (``TRUNCATE``,
then the dump's data, in one transaction), here while the service keeps running on it. The
search index (``INDEX_TABLES``) lives in the same database by default; a test that restores
it names it.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import psycopg

from watch_service.store.cluster import find_bindir
from watch_service.store.migrate import migrate

LOG_TABLES = ("topics", "records", "gaps")
AUTHZ_TABLES = ("authz_tenants", "authz_tuples", "authz_attributes", "authz_schemas")
SOURCE_TABLES = (*LOG_TABLES, "watch_sessions", *AUTHZ_TABLES)
INDEX_TABLES = ("search_documents", "search_index_marks")


class RestorableDatabase:
    """A database of its own on the test session's cluster, migrated."""

    def __init__(self, cluster_url: str, name: str, work_dir: Path) -> None:
        self.admin_url, self.name, self.work_dir = cluster_url, name, work_dir
        self.url = cluster_url.rsplit("/", 1)[0] + "/" + name
        self.bindir = find_bindir()
        self._dumps = 0

    def create(self) -> RestorableDatabase:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
            conn.execute(f'CREATE DATABASE "{self.name}"')
        migrate(self.url)
        return self

    def drop(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def _run(self, *argv: str) -> None:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (argv, done.stderr)

    async def dump(self, tables: tuple[str, ...] = SOURCE_TABLES) -> Path:
        """``tables`` as they stand now, as a backup keeps them."""
        self._dumps += 1
        path = self.work_dir / f"source-{self._dumps}.dump"
        selected = [arg for t in tables for arg in ("-t", t)]
        await asyncio.to_thread(
            self._run,
            str(self.bindir / "pg_dump"),
            "-Fc",
            "--data-only",
            *selected,
            "-f",
            str(path),
            self.url,
        )
        return path

    async def restore(self, dump: Path, tables: tuple[str, ...] = SOURCE_TABLES) -> None:
        """``tables`` back to what ``dump`` holds (the log alone: a restore that kept the
        session rows written since), in one transaction (``TRUNCATE``, then the dump's data as
        ``pg_restore`` writes it out), so the service sees the source jump back at once, as
        after a failover, and never half restored."""
        script = dump.with_suffix(".sql")
        selected = [arg for t in tables for arg in ("-t", t)]
        await asyncio.to_thread(
            self._run,
            str(self.bindir / "pg_restore"),
            "--data-only",
            *selected,
            "-f",
            str(script),
            str(dump),
        )
        script.write_text(f"TRUNCATE {', '.join(tables)};\n" + script.read_text())
        await asyncio.to_thread(
            self._run,
            str(self.bindir / "psql"),
            "--single-transaction",
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-f",
            str(script),
            self.url,
        )
