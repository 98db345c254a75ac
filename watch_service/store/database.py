"""Which PostgreSQL to talk to: ``DATABASE_URL`` if set, else the embedded cluster; and where
the pipeline keeps its own state: ``AUDITSYNC_PIPELINE_DATABASE_URL`` if set, else the same."""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from watch_service.settings import Settings, SettingsError
from watch_service.store.cluster import EmbeddedPostgres
from watch_service.store.migrate import migrate

log = logging.getLogger("auditsync")


def embedded_cluster(settings: Settings) -> EmbeddedPostgres:
    return EmbeddedPostgres(settings.local_dir / "pg", settings.pg_port)


def database_url(settings: Settings) -> str:
    """The URL in use; a malformed ``DATABASE_URL`` is a :class:`SettingsError` naming it."""
    if settings.database_url:
        return check_url(settings.database_url)
    return embedded_cluster(settings).url


def pipeline_url(settings: Settings, source_url: str) -> str:
    """The pipeline's database: its own when set (checked like ``DATABASE_URL``), else the
    source's."""
    if settings.pipeline_database_url:
        return check_url(settings.pipeline_database_url, "AUDITSYNC_PIPELINE_DATABASE_URL")
    return source_url


def check_url(url: str, name: str = "DATABASE_URL") -> str:
    """``url`` if libpq can parse it (URI or ``key=value`` form), else a SettingsError that
    does not repeat the value (it may hold a password)."""
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        # libpq's reason may quote the value, password and all: the value is not repeated.
        reason = str(exc).strip().splitlines()[0].replace(url, "…")
        raise SettingsError(
            f"{name}: cannot parse it ({reason}); expected "
            "postgresql://user[:password]@host[:port]/dbname or key=value pairs"
        ) from None
    return url


_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")
MASK = "****"


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``****``, for printing and logging."""
    if "://" not in url:
        return _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{hosts}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k == "password" for k, _ in pairs):
            query = urlencode([(k, MASK if k == "password" else v) for k, v in pairs], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def ensure_database(settings: Settings) -> str:
    """Start the embedded cluster if it is the one in use, migrate, return the URL."""
    if settings.embedded:
        embedded_cluster(settings).start()
    url = database_url(settings)
    for name in migrate(url):
        log.info("applied migration %s", name)
    return url
