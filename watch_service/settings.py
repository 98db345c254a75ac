"""The one frozen Settings object, built once from the environment and CLI flags.

Nothing else in the project reads ``os.environ``: every knob lives here, is parsed here, and a
missing or malformed value fails at start with the variable's name in the message.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from watch_service.protocol.errors import AuditsyncError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOG_FORMATS = ("text", "json")


class SettingsError(AuditsyncError, ValueError):
    """A setting is missing or malformed; the message names it."""


@dataclasses.dataclass(frozen=True)
class Settings:
    # Where the embedded cluster, landing zones and Airflow home live (git-ignored).
    local_dir: Path = PROJECT_ROOT / ".local"
    # None: use the embedded cluster in local_dir.
    database_url: str | None = None
    # The pipeline's own state (catalog, run tables, digests, alert ledger); None: the source's.
    pipeline_database_url: str | None = None
    pg_port: int = 54329
    host: str = "127.0.0.1"
    port: int = 8400
    keys_file: Path | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    max_record_bytes: int = 1024 * 1024
    # Per worker: each `serve` worker has its own pool (the service: workers x pool_max).
    pool_min: int = 2
    pool_max: int = 10
    pool_timeout_s: float = 5.0
    # `serve` worker processes on one port; None: one per core the process may run on.
    workers: int | None = None
    # Service-wide: one pass per interval, by the worker holding the retention leader lock.
    retention_interval_s: float = 5.0
    # SSE watch (seed 002)
    session_ttl_ms: int = 300_000
    # Service-wide: open SSE streams of every worker together (web/stream_slots.py).
    max_streams: int = 10_000
    write_timeout_s: float = 10.0
    cursor_flush_ms: int = 200
    # Under `serve --workers N`: a watch stream whose topics one other worker owns is passed to
    # that worker (web/handoff) while that worker holds fewer than this many open streams, so
    # an append to a topic of few watchers wakes only the process that commits it (less CPU,
    # a third of the wake-ups per record); a large fan-out is shared by every worker, as one
    # process writing every stream of a hot topic is slower (docs/benchmarks.md). 0: a stream
    # stays where it was accepted; OWNER_ALWAYS (`true`): passed whatever the owner holds.
    streams_to_owner: int = 128
    # Service-wide (counted in PostgreSQL): live watch sessions one key may hold (429 above).
    max_sessions_per_key: int = 1_000
    session_gc_interval_s: float = 30.0  # the periodic idle-session GC, besides POST/GET
    # Service-wide: all tailers' record caches of every worker together; each worker gets an
    # equal part (serve.share).
    tail_cache_bytes: int = 64 * 1024 * 1024
    # "on": an append is acknowledged once its commit is flushed; "off": once it is in the WAL
    # buffer (faster; `consistency: strong` watchers then wait for the flush).
    synchronous_commit: str = "on"
    # Authorization data (Permify / SpiceDB shapes)
    grpc_port: int | None = None  # SpiceDB gRPC surface; None = off
    grpc_key: str | None = None  # preshared bearer key for gRPC; None = open (dev)
    permify_watch_enabled: bool = True
    permify_grpc_port: int | None = None  # Permify gRPC surface (base.v1); None = off
    authz_history_ms: int = 24 * 3600 * 1000
    spicedb_checkpoint_ms: int = 1000
    grpc_tls_cert: Path | None = None  # PEM chain; with grpc_tls_key: TLS on the gRPC surfaces
    grpc_tls_key: Path | None = None
    spicedb_tenant: str = "t1"  # the one tenant the SpiceDB surface serves
    sink_key: str | None = None  # bearer key the sink presents to the service
    # Logging: "text" lines or one JSON object per line; an access log line per request.
    log_format: str = "text"
    access_log: bool = False
    # Browser origins (scheme://host[:port]) allowed cross-origin; empty = CORS off; "*" = any.
    cors_origins: tuple[str, ...] = ()
    # Client read timeouts: a request's header must be complete within header_timeout_s of
    # its first byte, its body read within body_timeout_s; an idle kept-alive connection is
    # closed after keepalive_timeout_s.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0
    # The audit log's transparency log (spark_jobs.tlog_command): the operator's Ed25519 note
    # key (PRIVATE+KEY+<name>+<id>+<key>), given inline or in a file, never both; the verifier
    # key alone (<name>+<id>+<key>) is enough to prove and verify.
    log_signing_key: str | None = dataclasses.field(default=None, repr=False)
    log_signing_key_file: Path | None = None
    log_verifier_key: str | None = None

    @property
    def embedded(self) -> bool:
        return self.database_url is None


OWNER_ALWAYS = 2**62  # streams_to_owner: more streams than any service holds


class _OwnerLimit:
    """``AUDITSYNC_STREAMS_TO_OWNER``: a count (0: never), or a boolean's word (``true``:
    always); the digits are counts here, not the booleans ``1`` and ``0``."""

    @classmethod
    def parse(cls, env_name: str, raw: str) -> int:
        word = raw.strip().lower()
        if word.isdigit() and len(word) <= 9:
            return int(word)
        if word in _BOOLS:
            return OWNER_ALWAYS if _BOOLS[word] else 0
        raise SettingsError(
            f"{env_name}: expected a stream count (0 = never), true or false, got {raw!r}"
        )


_ENV: dict[str, tuple[str, type]] = {
    "AUDITSYNC_HOME": ("local_dir", Path),
    "DATABASE_URL": ("database_url", str),
    "AUDITSYNC_PIPELINE_DATABASE_URL": ("pipeline_database_url", str),
    "AUDITSYNC_PG_PORT": ("pg_port", int),
    "AUDITSYNC_HOST": ("host", str),
    "AUDITSYNC_PORT": ("port", int),
    "AUDITSYNC_KEYS_FILE": ("keys_file", Path),
    "AUDITSYNC_MAX_BODY_BYTES": ("max_body_bytes", int),
    "AUDITSYNC_MAX_RECORD_BYTES": ("max_record_bytes", int),
    "AUDITSYNC_POOL_MAX": ("pool_max", int),
    "AUDITSYNC_POOL_TIMEOUT_S": ("pool_timeout_s", float),
    "AUDITSYNC_WORKERS": ("workers", int),
    "AUDITSYNC_RETENTION_INTERVAL_S": ("retention_interval_s", float),
    "AUDITSYNC_SESSION_TTL_MS": ("session_ttl_ms", int),
    "AUDITSYNC_MAX_STREAMS": ("max_streams", int),
    "AUDITSYNC_WRITE_TIMEOUT_S": ("write_timeout_s", float),
    "AUDITSYNC_CURSOR_FLUSH_MS": ("cursor_flush_ms", int),
    "AUDITSYNC_STREAMS_TO_OWNER": ("streams_to_owner", _OwnerLimit),
    "AUDITSYNC_MAX_SESSIONS_PER_KEY": ("max_sessions_per_key", int),
    "AUDITSYNC_SESSION_GC_INTERVAL_S": ("session_gc_interval_s", float),
    "AUDITSYNC_TAIL_CACHE_BYTES": ("tail_cache_bytes", int),
    "AUDITSYNC_SYNCHRONOUS_COMMIT": ("synchronous_commit", str),
    "AUDITSYNC_GRPC_PORT": ("grpc_port", int),
    "AUDITSYNC_GRPC_KEY": ("grpc_key", str),
    "AUDITSYNC_PERMIFY_WATCH": ("permify_watch_enabled", bool),
    "AUDITSYNC_PERMIFY_GRPC_PORT": ("permify_grpc_port", int),
    "AUDITSYNC_AUTHZ_HISTORY_MS": ("authz_history_ms", int),
    "AUDITSYNC_SPICEDB_CHECKPOINT_MS": ("spicedb_checkpoint_ms", int),
    "AUDITSYNC_GRPC_TLS_CERT": ("grpc_tls_cert", Path),
    "AUDITSYNC_GRPC_TLS_KEY": ("grpc_tls_key", Path),
    "AUDITSYNC_SPICEDB_TENANT": ("spicedb_tenant", str),
    "AUDITSYNC_SINK_KEY": ("sink_key", str),
    "AUDITSYNC_LOG_FORMAT": ("log_format", str),
    "AUDITSYNC_ACCESS_LOG": ("access_log", bool),
    "AUDITSYNC_CORS_ORIGINS": ("cors_origins", tuple),
    "AUDITSYNC_HEADER_TIMEOUT_S": ("header_timeout_s", float),
    "AUDITSYNC_BODY_TIMEOUT_S": ("body_timeout_s", float),
    "AUDITSYNC_KEEPALIVE_TIMEOUT_S": ("keepalive_timeout_s", float),
    "AUDITSYNC_LOG_SIGNING_KEY": ("log_signing_key", str),
    "AUDITSYNC_LOG_SIGNING_KEY_FILE": ("log_signing_key_file", Path),
    "AUDITSYNC_LOG_VERIFIER_KEY": ("log_verifier_key", str),
}

_POSITIVE = {
    "pg_port",
    "port",
    "max_body_bytes",
    "max_record_bytes",
    "pool_max",
    "pool_timeout_s",
    "workers",
    "retention_interval_s",
    "session_ttl_ms",
    "max_streams",
    "write_timeout_s",
    "cursor_flush_ms",
    "max_sessions_per_key",
    "session_gc_interval_s",
    "tail_cache_bytes",
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
    if kind is _OwnerLimit:
        return _OwnerLimit.parse(env_name, raw)
    if kind is bool:
        try:
            return _BOOLS[raw.strip().lower()]
        except KeyError:
            raise SettingsError(f"{env_name}: expected true/false, got {raw!r}") from None
    if kind is tuple:
        return _origins(env_name, raw)
    if kind is str:
        if not raw.strip():
            raise SettingsError(f"{env_name}: must not be empty")
        return raw
    try:
        value = kind(raw)
    except ValueError:
        raise SettingsError(f"{env_name}: expected {kind.__name__}, got {raw!r}") from None
    if kind is float and not math.isfinite(value):  # float() accepts "nan" and "inf"
        raise SettingsError(f"{env_name}: expected a finite number, got {raw!r}")
    return value


_ORIGIN = re.compile(r"https?://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?")


def _origins(env_name: str, raw: str) -> tuple[str, ...]:
    """A comma-separated list of browser origins, exactly as browsers send ``Origin``."""
    origins = tuple(o.strip() for o in raw.split(",") if o.strip())
    for origin in origins:
        if origin != "*" and not _ORIGIN.fullmatch(origin):
            raise SettingsError(
                f"{env_name}: {origin!r} is not an origin (scheme://host[:port], no path) or *"
            )
    return origins


_PORTS = {"pg_port", "port", "grpc_port"}


def _check_ranges(values: dict[str, Any], source: dict[str, str]) -> None:
    """Ports within 1..65535, the other numbers > 0 and finite; the message names the source."""
    for field, value in values.items():
        where = source[field]
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingsError(f"{where}: expected a finite number, got {value!r}")
        if field in _PORTS and not 1 <= value <= 65535:
            raise SettingsError(f"{where}: a port must be within 1..65535, got {value!r}")
        if field in _POSITIVE and value <= 0:
            raise SettingsError(f"{where}: must be > 0, got {value!r}")


def log_format(environ: Mapping[str, str] | None = None) -> str:
    """``AUDITSYNC_LOG_FORMAT`` alone (``text`` unless set), checked as :func:`load` checks it:
    the one logging setting of the commands that need no other (the Spark jobs)."""
    env = os.environ if environ is None else environ
    value = env.get("AUDITSYNC_LOG_FORMAT") or "text"
    if value not in LOG_FORMATS:
        raise SettingsError(f"AUDITSYNC_LOG_FORMAT: expected text or json, got {value!r}")
    return value


def load(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build Settings from ``environ`` (default ``os.environ``) then explicit overrides.

    Overrides are CLI flags; a value of None means "flag not given".
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    # Where each value came from, so a message names what the user wrote: the variable or flag.
    source: dict[str, str] = {}
    for env_name, (field, kind) in _ENV.items():
        raw = env.get(env_name)
        if raw is not None and raw != "":
            values[field] = _parse(env_name, kind, raw)
            source[field] = env_name
    for field, value in overrides.items():
        if value is not None:
            values[field] = value
            source[field] = "--" + field.replace("_", "-")
    _check_ranges(values, source)
    if values.get("synchronous_commit", "on") not in ("on", "off"):
        raise SettingsError(
            f"{source['synchronous_commit']}: expected on or off, "
            f"got {values['synchronous_commit']!r}"
        )
    if values.get("log_format", "text") not in LOG_FORMATS:
        raise SettingsError(
            f"{source['log_format']}: expected text or json, got {values['log_format']!r}"
        )
    if (values.get("grpc_tls_cert") is None) != (values.get("grpc_tls_key") is None):
        raise SettingsError(
            "AUDITSYNC_GRPC_TLS_CERT and AUDITSYNC_GRPC_TLS_KEY: set both (TLS on) or neither"
        )
    if values.get("log_signing_key") and values.get("log_signing_key_file"):
        raise SettingsError(
            "AUDITSYNC_LOG_SIGNING_KEY and AUDITSYNC_LOG_SIGNING_KEY_FILE: set one, not both"
        )
    if "local_dir" in values:
        values["local_dir"] = Path(values["local_dir"]).resolve()
    return Settings(**values)
