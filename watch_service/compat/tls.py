"""TLS for the gRPC surfaces (SpiceDB, Permify): one place turns the settings'
``grpc_tls_cert`` / ``grpc_tls_key`` into server credentials, so every surface serves the same
certificate and fails at start-up the same way when a file cannot be read.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from watch_service.settings import Settings, SettingsError


def _read(path: Path, env_name: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{env_name}: cannot read {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise SettingsError(f"{env_name}: {path} is not a PEM file")
    return data


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from the settings' certificate chain and key; None = plaintext.
    Raises SettingsError naming the variable when a file is missing or unreadable."""
    if settings.grpc_tls_cert is None or settings.grpc_tls_key is None:
        return None
    chain = _read(settings.grpc_tls_cert, "AUDITSYNC_GRPC_TLS_CERT")
    key = _read(settings.grpc_tls_key, "AUDITSYNC_GRPC_TLS_KEY")
    return grpc.ssl_server_credentials([(key, chain)])


def add_port(server: grpc.aio.Server, address: str, settings: Settings) -> int:
    """Bind ``address`` with TLS when configured, else in plaintext; returns the port."""
    creds = server_credentials(settings)
    if creds is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, creds)
