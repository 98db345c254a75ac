"""How the plugin reaches the landing zone: the landing Variable's value (a path, ``file://…``
or ``s3://bucket/prefix``, named by ``watch_service.storage``) and, for S3, the credentials.

Credentials come from an Airflow connection of type ``aws`` when one is named (the
``aws_conn_id`` argument, else the ``AUDITSYNC_AWS_CONN_ID`` setting). With the amazon provider
installed (``pip install auditsync[aws]``) its ``AwsBaseHook`` reads the connection, so all of
it works as in any other task: ``role_arn`` and assume-role, ``profile_name``, the session's
keys and token, ``endpoint_url`` / ``service_config.s3.endpoint_url``, ``region_name``
(:func:`hook_s3_config`). Without it the connection's fields are read here, the provider's
subset that needs no STS (login = access key id, password = secret access key, extra
``profile_name``, ``endpoint_url`` or ``service_config.s3.endpoint_url``, ``region_name``,
``aws_session_token``; :func:`s3_config`): a connection without keys uses its ``profile_name``
from the worker's shared config and credentials files, else the AWS default credential chain.
With no connection named, the process's own settings are used (``AWS_ENDPOINT_URL``,
``AWS_REGION``, and the default chain: ``AWS_*`` keys, ``AWS_PROFILE``, web identity, container
or instance metadata). :func:`landing_storage` is the only lookup.
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


def _check_endpoint(conn_id: str, endpoint: object) -> None:
    if endpoint is not None and not (
        isinstance(endpoint, str) and endpoint.startswith(("http://", "https://"))
    ):
        raise StorageError(
            f"connection {conn_id!r}: extra endpoint_url={endpoint!r}: expected http(s)://host[:port]"
        )


def s3_config(
    conn_id: str, login: str | None, password: str | None, extra: Mapping[str, Any]
) -> S3Config:
    """An ``aws`` connection's fields as an :class:`S3Config`; a malformed endpoint is named."""
    service = extra.get("service_config") or {}
    s3_service = service.get("s3") if isinstance(service, Mapping) else None
    endpoint = extra.get("endpoint_url") or (
        s3_service.get("endpoint_url") if isinstance(s3_service, Mapping) else None
    )
    _check_endpoint(conn_id, endpoint)
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
    config = hook_s3_config(conn_id)
    if config is None:  # no amazon provider: the connection's fields, read here
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
        config = s3_config(conn_id, conn.login, conn.password, conn.extra_dejson)
    return Storage(location, config)


def hook_s3_config(conn_id: str) -> S3Config | None:
    """The S3 settings the amazon provider's ``AwsBaseHook`` makes of connection ``conn_id``
    (after any assume-role: the session's keys and token); None without that provider."""
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
    endpoint = hook.conn_config.get_service_endpoint_url("s3")
    _check_endpoint(conn_id, endpoint)
    try:
        if hook.get_session(region_name=hook.region_name).get_credentials() is None:
            raise StorageError(
                f"connection {conn_id!r}: no AWS credentials (no keys, profile_name or role_arn "
                "in it, none in the worker's default chain)"
            )
        credentials = hook.get_credentials(region_name=hook.region_name)  # masked in task logs
    except (BotoCoreError, ClientError) as exc:  # e.g. STS refused the role_arn
        raise StorageError(f"connection {conn_id!r}: AWS credentials: {exc}") from None
    return S3Config(
        endpoint=endpoint or None,
        access_key=credentials.access_key,
        secret_key=credentials.secret_key,
        session_token=credentials.token or None,
        region=hook.region_name or DEFAULT_REGION,
    )
