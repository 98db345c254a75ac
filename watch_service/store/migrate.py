"""Forward-only, numbered SQL migrations recorded in ``schema_migrations``.

Each file ``NNN_name.sql`` is applied once, in its own transaction, under an advisory lock so
two processes migrating at once do not race. A server with ``track_commit_timestamp`` off is
refused: the authorization-data watch depends on it.
"""

from __future__ import annotations

import re
from importlib import resources

import psycopg

from watch_service.protocol.errors import AuditsyncError
from watch_service.store.server_state import commit_timestamps_on_sync

LOCK_KEY = 0x6175646974  # "audit"
_FILE_RE = re.compile(r"(\d{3})_([a-z0-9_]+)\.sql")


class MigrationError(AuditsyncError):
    pass


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration file, in order."""
    out = []
    for entry in resources.files("watch_service.store").joinpath("migrations").iterdir():
        m = _FILE_RE.fullmatch(entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text()))
    out.sort()
    versions = [v for v, _, _ in out]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a number: {versions}")
    return out


def latest_version() -> int:
    return max((v for v, _, _ in available()), default=0)


def check_server(conn: psycopg.Connection) -> None:
    if not commit_timestamps_on_sync(conn):
        raise MigrationError(
            "track_commit_timestamp is off on this PostgreSQL server; auditsync needs it "
            "(commit timestamps back the Permify/SpiceDB watch). Fix: ALTER SYSTEM SET "
            "track_commit_timestamp = on; then restart the server."
        )


def migrate(url: str) -> list[str]:
    """Apply pending migrations; return the names applied (empty when up to date)."""
    applied: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        check_server(conn)
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            conn.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
                                version int PRIMARY KEY, name text NOT NULL,
                                applied_at timestamptz NOT NULL DEFAULT now())""")
            done = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, sql in available():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
                applied.append(f"{version:03d}_{name}")
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return applied
