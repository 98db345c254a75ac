"""Versioned authorization schemas in PostgreSQL, for both dialects (``permify``, ``spicedb``):
``authz_schemas`` rows (migration 009) hold each version's source text and the parsed
``definitions`` its dialect's validator uses; the latest row of (tenant, dialect) is current.

A schema write is a change like any other: in one transaction it takes the tenant's
change-topic row lock (``authz_writes.LOCK_TOPIC``, so it is ordered with data writes), inserts
the version and appends a change record naming it (``protocol.authz.schema_record``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import time
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from watch_service.protocol import authz as pa
from watch_service.protocol.requests import NewRecord
from watch_service.store import topics
from watch_service.store.authz_writes import LOCK_TOPIC, AuthzStoreError, ensure_topic

DIALECTS = ("permify", "spicedb")


@dataclasses.dataclass(frozen=True)
class StoredSchema:
    tenant: str
    dialect: str
    version: str
    source: str
    definitions: Any  # None for versions written before migration 009: parse ``source``
    seq: int | None  # the change record's seq (None before migration 009)
    created_at: dt.datetime


_COLUMNS = "tenant, dialect, version, source, definitions, seq, created_at"


def new_version() -> str:
    """A version id that sorts by creation time (microseconds, hex) with a random tail."""
    return f"{time.time_ns() // 1000:x}{secrets.token_hex(3)}"


async def write_schema(
    conn: AsyncConnection,
    tenant: str,
    dialect: str,
    source: str,
    definitions: Any,
    history_ms: int,
) -> StoredSchema:
    """Store a new current version and append its change record, in one transaction.
    Raises ``TenantNotFound``."""
    assert dialect in DIALECTS, dialect
    topic = pa.change_topic(tenant)
    version = new_version()
    record = pa.schema_record(tenant, dialect, pa.SchemaChange(dialect, version))
    for _ in range(2):
        async with conn.transaction():
            cur = await conn.execute(LOCK_TOPIC, (topic, tenant))
            if await cur.fetchone() is not None:
                result = await topics.append(conn, topic, [NewRecord(record, None, None, None)])
                assert result is not None  # the topic row is locked by this transaction
                cur = await conn.execute(
                    f"INSERT INTO authz_schemas ({_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, clock_timestamp()) "
                    f"RETURNING {_COLUMNS}",
                    (tenant, dialect, version, source, Jsonb(definitions), result.last_seq),
                )
                row = await cur.fetchone()
                assert row is not None
                return StoredSchema(*row)
        await ensure_topic(conn, tenant, history_ms)  # raises TenantNotFound
    raise AuthzStoreError(f"the change topic of tenant {tenant!r} vanished; retry")


async def read_schema(
    conn: AsyncConnection, tenant: str, dialect: str, version: str | None = None
) -> StoredSchema | None:
    """That version of the tenant's schema in ``dialect``, or the latest when version is None;
    None when there is none."""
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM authz_schemas WHERE tenant = %s AND dialect = %s "
        "AND (%s::text IS NULL OR version = %s) ORDER BY created_at DESC, version DESC LIMIT 1",
        (tenant, dialect, version, version),
    )
    row = await cur.fetchone()
    return None if row is None else StoredSchema(*row)


async def list_schemas(
    conn: AsyncConnection, tenant: str, dialect: str, after: str | None, limit: int
) -> list[tuple[str, dt.datetime]]:
    """(version, created_at) of the tenant's schema versions in ``dialect``, newest first,
    strictly older than version ``after`` when given (keyset paging)."""
    cur = await conn.execute(
        "SELECT version, created_at FROM authz_schemas WHERE tenant = %s AND dialect = %s "
        "AND (%s::text IS NULL OR (created_at, version) < (SELECT created_at, version FROM "
        "authz_schemas WHERE tenant = %s AND dialect = %s AND version = %s)) "
        "ORDER BY created_at DESC, version DESC LIMIT %s",
        (tenant, dialect, after, tenant, dialect, after, limit),
    )
    return [(r[0], r[1]) for r in await cur.fetchall()]
