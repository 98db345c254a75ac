"""How the plugin reaches the landing zone: the landing Variable's value (a path, ``file://…``
or ``s3://bucket/prefix``, named by ``watch_service.storage``) and, for S3, the credentials.

Credentials come from an Airflow connection of type ``aws`` when one is named (the
``aws_conn_id`` argument, else the ``AUDITSYNC_AWS_CONN_ID`` setting): its fields are the
amazon provider's (login = access key id, password = secret access key, extra ``profile_name``,
``endpoint_url`` or ``service_config.s3.endpoint_url``, ``region_name``,
``aws_session_token``), read here without installing that provider. A connection without keys
uses its ``profile_name`` from the worker's shared config and credentials files, else the AWS
default credential chain. With no connection named, the process's own settings are used
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, and the default chain: ``AWS_*`` keys, ``AWS_PROFILE``,
web identity, container or instance metadata). :func:`s3_config` is the pure translation;
:func:`landing_storage` the only lookup.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from watch_service.storage import DEFAULT_REGION, Location, S3Config, Storage, StorageError

AWS_CONN_ID_ENV = "AUDITSYNC_AWS_CONN_ID"


def aws_conn_id_setting(environ: Mapping[str, str] | None = None) -> str | None:
    """The connection id the ``AUDITSYNC_AWS_CONN_ID`` setting names, or None."""
    env = os.environ if environ is None else environ
    return env.get(AWS_CONN_ID_ENV) or None


def s3_config(
    conn_id: str, login: str | None, password: str | None, extra: Mapping[str, Any]
) -> S3Config:
    """An ``aws`` connection's fields as an :class:`S3Config`; a malformed endpoint is named."""
    service = extra.get("service_config") or {}
    s3_service = service.get("s3") if isinstance(service, Mapping) else None
    endpoint = extra.get("endpoint_url") or (
        s3_service.get("endpoint_url") if isinstance(s3_service, Mapping) else None
    )
    if endpoint is not None and not (
        isinstance(endpoint, str) and endpoint.startswith(("http://", "https://"))
    ):
        raise StorageError(
            f"connection {conn_id!r}: extra endpoint_url={endpoint!r}: expected http(s)://host[:port]"
        )
    profile = extra.get("profile_name")
    if profile is not None and not (isinstance(profile, str) and profile.strip()):
        raise StorageError(
            f"connection {conn_id!r}: extra profile_name={profile!r}: expected a profile's name"
        )
    return S3Config(
        endpoint=endpoint or None,
        access_key=login or None,
        secret_key=password or None,
        session_token=extra.get("aws_session_token") or None,
        region=extra.get("region_name") or DEFAULT_REGION,
        profile=profile.strip() if profile else None,
    )


def landing_storage(landing: str, aws_conn_id: str | None = None) -> Storage:
    """The landing zone at ``landing``; raises StorageError for a location it cannot name."""
    location = Location.parse(landing)
    if location.is_local:
        return Storage(location)
    conn_id = aws_conn_id or aws_conn_id_setting()
    if conn_id is None:
        return Storage(location, S3Config.from_env())
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    return Storage(location, s3_config(conn_id, conn.login, conn.password, conn.extra_dejson))
