"""The lock that keeps a second sink off a consumer's landing: two sinks on one consumer would
repeat frame numbers and overwrite each other's segments and state.

* local disk: an ``flock`` on ``<landing>/<consumer>/.lock`` (released by the kernel when the
  process ends, however it ends);
* object storage, which has no locks: a PostgreSQL session advisory lock keyed by the
  consumer's location URI, taken on a connection the sink holds for its life. PostgreSQL
  releases it when that session ends, so a killed sink's lock frees itself as its connection
  drops. A new sink waits up to :data:`WAIT_S` for that before it is refused. Before each
  segment the sink checks its session is still alive: a lost session is a lost lock, and the
  sink stops rather than write unguarded.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

import psycopg

from watch_service.protocol.errors import AuditsyncError
from watch_service.storage import LocalLock, Storage

LOCK_FILE = ".lock"
WAIT_S = 2.0


class LockError(AuditsyncError):
    """The consumer's lock is held by another sink, cannot be taken, or was lost."""


class ConsumerLock(Protocol):
    def check(self) -> None:
        """Raise :class:`LockError` if the lock is no longer held."""

    def release(self) -> None: ...


def lock_key(uri: str) -> int:
    """The advisory lock key (a signed 64-bit integer) of a consumer location's URI."""
    digest = hashlib.blake2b(b"auditsync.sink\0" + uri.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class FileLock:
    def __init__(self, held: LocalLock) -> None:
        self._held = held

    def check(self) -> None:
        """An flock cannot be lost while the process holds its descriptor."""

    def release(self) -> None:
        self._held.release()


class AdvisoryLock:
    def __init__(self, conn: psycopg.Connection, uri: str) -> None:
        self._conn, self._uri = conn, uri

    @classmethod
    def take(cls, database_url: str, uri: str, wait_s: float = WAIT_S) -> AdvisoryLock:
        try:
            conn = psycopg.connect(
                database_url, autocommit=True, application_name=f"auditsync sink {uri}"[:63]
            )
        except psycopg.OperationalError as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise LockError(
                f"{uri}: cannot reach PostgreSQL for the consumer lock ({reason})"
            ) from None
        try:
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(wait_s * 1000)}",))
            conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(uri),))
            conn.execute("RESET lock_timeout")
        except psycopg.errors.LockNotAvailable:
            conn.close()
            raise LockError(
                f"{uri}: another sink holds this consumer's lock (a PostgreSQL advisory lock, "
                f"still held after {wait_s:g}s)"
            ) from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, uri)

    def check(self) -> None:
        try:
            self._conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise LockError(
                f"{self._uri}: lost the consumer lock (its PostgreSQL session ended: "
                f"{str(exc).strip() or type(exc).__name__}); stopping"
            ) from None

    def release(self) -> None:
        self._conn.close()


def take(store: Storage, database_url: str | None) -> ConsumerLock:
    """Lock the consumer at ``store`` (its folder or prefix) for this process, or refuse."""
    uri = store.location.uri
    if store.location.is_local:
        held = store.lock_file(LOCK_FILE)
        if held is None:
            raise LockError(f"{uri}: another sink holds this consumer's lock")
        return FileLock(held)
    if not database_url:
        raise LockError(
            f"{uri}: an object store has no file locks; the sink locks its consumer in "
            "PostgreSQL: give --database-url or set DATABASE_URL"
        )
    return AdvisoryLock.take(database_url, uri)
