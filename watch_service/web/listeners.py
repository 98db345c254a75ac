"""Start-up checks of the service's listeners, before anything is served.

``auditsync serve`` binds its HTTP socket here and checks that the gRPC port is free *before*
starting the application, so a port in use, a host that does not resolve or a missing extra is
one line naming the setting, never a traceback after "serving on". The HTTP socket is never
``SO_REUSEPORT``: a port another process holds fails the start, and no later process can join
ours. A supervisor of workers binds it once here and its workers inherit it.
"""

from __future__ import annotations

import errno
import importlib.util
import socket

from watch_service.protocol.errors import AuditsyncError
from watch_service.settings import Settings

AUTHZ_MODULES = ("grpc", "authzed")


class StartupError(AuditsyncError):
    """The service cannot start as configured; the message is one line naming the setting."""


def reason(exc: OSError) -> str:
    """Why a bind or listen failed, in words."""
    if exc.errno == errno.EADDRINUSE:
        return "the port is already in use"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "the address is not on this machine"
    return exc.strerror or str(exc)


def bind_http(host: str, port: int, *, listen: bool = True, what: str = "") -> socket.socket:
    """A TCP socket bound to ``host:port`` (and listening, unless ``listen`` is false: the
    server then listens once it is ready, so an open port still means a ready service);
    :class:`StartupError` naming ``what`` (the setting) when it cannot be had."""
    label = f" ({what})" if what else ""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host}:{port}{label}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        if listen:
            sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {host}:{port}{label}: {reason(exc)}") from None
    sock.setblocking(False)
    return sock


def http_unavailable(host: str, port: int, exc: OSError) -> StartupError:
    """The one line for an HTTP socket that bound but cannot listen (the port was taken
    between the bind and the listen)."""
    return StartupError(f"cannot listen on {host}:{port} ({HTTP_SETTING}): {reason(exc)}")


def check_authz_extra() -> None:
    """The gRPC surface needs the ``authz`` extra; say how to install it when it is missing."""
    missing = [m for m in AUTHZ_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise StartupError(
            f"AUDITSYNC_GRPC_PORT / --grpc-port: the SpiceDB gRPC surface needs "
            f"{', '.join(missing)}: pip install 'auditsync[authz]'"
        )


HTTP_SETTING = "AUDITSYNC_PORT / --port"
GRPC_SETTING = "AUDITSYNC_GRPC_PORT / --grpc-port"
PERMIFY_GRPC_SETTING = "AUDITSYNC_PERMIFY_GRPC_PORT / --permify-grpc-port"


def check_grpc(settings: Settings) -> None:
    """The gRPC ports (those enabled) are free and their extra installed."""
    ports = [
        (port, what)
        for port, what in (
            (settings.grpc_port, GRPC_SETTING),
            (settings.permify_grpc_port, PERMIFY_GRPC_SETTING),
        )
        if port is not None
    ]
    if ports:
        check_authz_extra()
    for port, what in ports:
        bind_http(settings.host, port, what=what).close()
