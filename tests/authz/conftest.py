"""Fixtures for the authorization-data surfaces: a service with the SpiceDB gRPC surface on,
and the official clients (``permify`` REST, ``authzed`` gRPC) pointed at it."""

from __future__ import annotations

import dataclasses
import types

import permify
import pytest
from authzed.api.v1 import InsecureClient

from watch_service.settings import Settings

from ..support import InProcessService, free_port
from .clients import GRPC_KEY, permify_grpc_client


@pytest.fixture(scope="session")
async def authz_service(pg_url, base_settings: Settings):
    """A dev-mode service (Permify REST and gRPC open) with gRPC on; the gRPC client still
    sends ``GRPC_KEY``, which dev mode ignores."""
    settings = dataclasses.replace(base_settings, grpc_port=free_port(), spicedb_checkpoint_ms=200)
    svc = await InProcessService(settings, pg_url).start()
    svc.grpc_target = f"127.0.0.1:{settings.grpc_port}"
    yield svc
    await svc.stop()


@pytest.fixture(scope="session")
def permify_api(authz_service) -> permify.ApiClient:
    return permify.ApiClient(permify.Configuration(host=authz_service.url))


@pytest.fixture(scope="session")
def spicedb(authz_service) -> InsecureClient:
    return InsecureClient(authz_service.grpc_target, GRPC_KEY)


@pytest.fixture(scope="session")
async def permify_grpc(pg_url, base_settings):
    """The service with the Permify gRPC surface on, and a client; ``restart()`` replaces the
    service by a new one on the same ports."""
    settings = dataclasses.replace(base_settings, permify_grpc_port=free_port())
    box = types.SimpleNamespace(svc=await InProcessService(settings, pg_url).start())
    box.c = permify_grpc_client(settings.permify_grpc_port)

    async def restart() -> None:
        await box.c.channel.close()
        await box.svc.stop()
        box.svc = await InProcessService(settings, pg_url).start()
        box.c = permify_grpc_client(settings.permify_grpc_port)

    box.restart = restart
    yield box
    await box.c.channel.close()
    await box.svc.stop()


@pytest.fixture
def conn(db):
    """The session database's ``db`` connection, named so that it does not shadow the
    ``authz_writes as db`` import of the store tests."""
    return db
