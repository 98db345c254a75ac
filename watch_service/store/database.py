"""Which PostgreSQL to talk to: ``DATABASE_URL`` if set, else the embedded cluster."""

from __future__ import annotations

import logging

from watch_service.settings import Settings
from watch_service.store.cluster import EmbeddedPostgres
from watch_service.store.migrate import migrate

log = logging.getLogger("auditsync")


def embedded_cluster(settings: Settings) -> EmbeddedPostgres:
    return EmbeddedPostgres(settings.local_dir / "pg", settings.pg_port)


def database_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    return embedded_cluster(settings).url


def ensure_database(settings: Settings) -> str:
    """Start the embedded cluster if it is the one in use, migrate, return the URL."""
    if settings.embedded:
        embedded_cluster(settings).start()
    url = database_url(settings)
    for name in migrate(url):
        log.info("applied migration %s", name)
    return url
