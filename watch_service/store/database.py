"""Which PostgreSQL to talk to: ``DATABASE_URL`` if set, else the embedded cluster."""
from __future__ import annotations

from ..embedded_pg import EmbeddedPostgres
from ..settings import Settings


def embedded_cluster(settings: Settings) -> EmbeddedPostgres:
    return EmbeddedPostgres(settings.local_dir / "pg", settings.pg_port)


def database_url(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    return embedded_cluster(settings).url
