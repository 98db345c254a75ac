"""What the service asks PostgreSQL about itself: whether commit timestamps are on (the
Permify watch, readiness and migrations all need them) and which schema migration it is at."""

from __future__ import annotations

import dataclasses

import psycopg
from psycopg import AsyncConnection

COMMIT_TIMESTAMPS = "SELECT current_setting('track_commit_timestamp') = 'on'"
READINESS = (
    "SELECT current_setting('track_commit_timestamp') = 'on', "
    "(SELECT coalesce(max(version), 0) FROM schema_migrations)"
)
COMMIT_TIMESTAMPS_FIX = "ALTER SYSTEM SET track_commit_timestamp = on; then restart the server"


@dataclasses.dataclass(frozen=True)
class Readiness:
    commit_timestamps: bool
    schema_version: int


async def commit_timestamps_on(conn: AsyncConnection) -> bool:
    cur = await conn.execute(COMMIT_TIMESTAMPS)
    row = await cur.fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    return bool(row[0])


def commit_timestamps_on_sync(conn: psycopg.Connection) -> bool:
    row = conn.execute(COMMIT_TIMESTAMPS).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    return bool(row[0])


async def readiness(conn: AsyncConnection) -> Readiness:
    cur = await conn.execute(READINESS)
    row = await cur.fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    commit_ts, version = row
    return Readiness(bool(commit_ts), int(version))
