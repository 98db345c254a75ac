"""The one frozen Settings object, built once from the environment and CLI flags.

Nothing else in the project reads ``os.environ``: every knob lives here, is parsed here, and a
missing or malformed value fails at start with the variable's name in the message.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from watch_service.protocol.errors import AuditsyncError

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class SettingsError(AuditsyncError, ValueError):
    """A setting is missing or malformed; the message names it."""


@dataclasses.dataclass(frozen=True)
class Settings:
    # Where the embedded cluster, landing zones and Airflow home live (git-ignored).
    local_dir: Path = PROJECT_ROOT / ".local"
    # None: use the embedded cluster in local_dir.
    database_url: str | None = None
    pg_port: int = 54329
    host: str = "127.0.0.1"
    port: int = 8400
    keys_file: Path | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    max_record_bytes: int = 1024 * 1024
    pool_min: int = 2
    pool_max: int = 10
    pool_timeout_s: float = 5.0
    retention_interval_s: float = 5.0
    # SSE watch (seed 002)
    session_ttl_ms: int = 300_000
    max_streams: int = 10_000
    write_timeout_s: float = 10.0
    cursor_flush_ms: int = 200
    # "on": an append is acknowledged once its commit is flushed; "off": once it is in the WAL
    # buffer (faster; `consistency: strong` watchers then wait for the flush).
    synchronous_commit: str = "on"
    # Authorization data (Permify / SpiceDB shapes)
    grpc_port: int | None = None  # SpiceDB gRPC surface; None = off
    grpc_key: str | None = None  # preshared bearer key for gRPC; None = open (dev)
    permify_watch_enabled: bool = True
    authz_history_ms: int = 24 * 3600 * 1000
    spicedb_checkpoint_ms: int = 1000
    sink_key: str | None = None  # bearer key the sink presents to the service
    # Client read timeouts: a request's header must be complete within header_timeout_s of
    # its first byte, its body read within body_timeout_s; an idle kept-alive connection is
    # closed after keepalive_timeout_s.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0

    @property
    def embedded(self) -> bool:
        return self.database_url is None


_ENV: dict[str, tuple[str, type]] = {
    "AUDITSYNC_HOME": ("local_dir", Path),
    "DATABASE_URL": ("database_url", str),
    "AUDITSYNC_PG_PORT": ("pg_port", int),
    "AUDITSYNC_HOST": ("host", str),
    "AUDITSYNC_PORT": ("port", int),
    "AUDITSYNC_KEYS_FILE": ("keys_file", Path),
    "AUDITSYNC_MAX_BODY_BYTES": ("max_body_bytes", int),
    "AUDITSYNC_MAX_RECORD_BYTES": ("max_record_bytes", int),
    "AUDITSYNC_POOL_MAX": ("pool_max", int),
    "AUDITSYNC_POOL_TIMEOUT_S": ("pool_timeout_s", float),
    "AUDITSYNC_RETENTION_INTERVAL_S": ("retention_interval_s", float),
    "AUDITSYNC_SESSION_TTL_MS": ("session_ttl_ms", int),
    "AUDITSYNC_MAX_STREAMS": ("max_streams", int),
    "AUDITSYNC_WRITE_TIMEOUT_S": ("write_timeout_s", float),
    "AUDITSYNC_CURSOR_FLUSH_MS": ("cursor_flush_ms", int),
    "AUDITSYNC_SYNCHRONOUS_COMMIT": ("synchronous_commit", str),
    "AUDITSYNC_GRPC_PORT": ("grpc_port", int),
    "AUDITSYNC_GRPC_KEY": ("grpc_key", str),
    "AUDITSYNC_PERMIFY_WATCH": ("permify_watch_enabled", bool),
    "AUDITSYNC_AUTHZ_HISTORY_MS": ("authz_history_ms", int),
    "AUDITSYNC_SPICEDB_CHECKPOINT_MS": ("spicedb_checkpoint_ms", int),
    "AUDITSYNC_SINK_KEY": ("sink_key", str),
    "AUDITSYNC_HEADER_TIMEOUT_S": ("header_timeout_s", float),
    "AUDITSYNC_BODY_TIMEOUT_S": ("body_timeout_s", float),
    "AUDITSYNC_KEEPALIVE_TIMEOUT_S": ("keepalive_timeout_s", float),
}

_POSITIVE = {
    "pg_port",
    "port",
    "max_body_bytes",
    "max_record_bytes",
    "pool_max",
    "pool_timeout_s",
    "retention_interval_s",
    "session_ttl_ms",
    "max_streams",
    "write_timeout_s",
    "cursor_flush_ms",
    "authz_history_ms",
    "spicedb_checkpoint_ms",
    "header_timeout_s",
    "body_timeout_s",
    "keepalive_timeout_s",
}
_BOOLS = {
    "1": True,
    "true": True,
    "on": True,
    "yes": True,
    "0": False,
    "false": False,
    "off": False,
    "no": False,
}


def _parse(env_name: str, kind: type, raw: str) -> Any:
    if kind is bool:
        try:
            return _BOOLS[raw.strip().lower()]
        except KeyError:
            raise SettingsError(f"{env_name}: expected true/false, got {raw!r}") from None
    if kind is str:
        if not raw.strip():
            raise SettingsError(f"{env_name}: must not be empty")
        return raw
    try:
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{env_name}: expected {kind.__name__}, got {raw!r}") from None


def load(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build Settings from ``environ`` (default ``os.environ``) then explicit overrides.

    Overrides are CLI flags; a value of None means "flag not given".
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for env_name, (field, kind) in _ENV.items():
        raw = env.get(env_name)
        if raw is not None and raw != "":
            values[field] = _parse(env_name, kind, raw)
    values.update({k: v for k, v in overrides.items() if v is not None})
    for field in _POSITIVE:
        if field in values and values[field] <= 0:
            raise SettingsError(f"{field}: must be > 0, got {values[field]!r}")
    if values.get("synchronous_commit", "on") not in ("on", "off"):
        raise SettingsError(
            f"synchronous_commit: expected on or off, got {values['synchronous_commit']!r}"
        )
    if "local_dir" in values:
        values["local_dir"] = Path(values["local_dir"]).resolve()
    return Settings(**values)
