"""Permify's gRPC API (package ``base.v1``, seed 000: "The Watch API only supports gRPC (port
3478)"): services Watch, Tenancy, Schema (Write, Read, List) and Data (Write, Delete,
WriteRelationships, DeleteRelationships, ReadRelationships, ReadAttributes), served by a
``grpc.aio`` server in the service's event loop on ``settings.permify_grpc_port``, with the
stubs generated from ``compat/proto/permify_base_v1.proto``.

Each call is the same ``permify_ops`` operation the REST surface runs: the request message
becomes its document (``MessageToDict``, proto field names, defaults included), the result
document becomes the response message (``ParseDict``). Auth: ``authorization: Bearer <key>``
metadata checked against the service's keys (UNAUTHENTICATED / PERMISSION_DENIED). Calls of
Permify's API outside this subset (Permission.Check, Lookup*, Expand, bundles, partial schema
writes) answer UNIMPLEMENTED saying why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import psycopg
import psycopg_pool
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message

from watch_service.compat import permify_json as pj
from watch_service.compat import permify_ops as ops
from watch_service.compat import permify_stream as stream
from watch_service.compat import tls
from watch_service.compat.grpc_nul import RefuseNul
from watch_service.compat.proto import permify_base_v1_pb2 as pb
from watch_service.compat.proto import permify_base_v1_pb2_grpc as pb_grpc
from watch_service.engine.topic_follower import HistoryLost, SourceRewound, TopicGone
from watch_service.protocol.errors import ApiError
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import HUB, KEYS, POOL, SETTINGS
from watch_service.web.auth import Key, metadata_authorization

log = logging.getLogger("auditsync.permify.grpc")
IDLE_S = 1.0
_CODES = {c.value[0]: c for c in grpc.StatusCode}


def authenticate(app: web.Application, context: grpc.aio.ServicerContext) -> Key | None:
    """The caller's key from ``authorization`` metadata (None in dev mode): the one place this
    surface authenticates, so it can move to the shared authenticate of every surface."""
    return app[KEYS].authenticate(metadata_authorization(context.invocation_metadata()))


def _status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, pj.PermifyError):
        return _CODES.get(exc.code, grpc.StatusCode.INTERNAL), exc.message
    if isinstance(exc, ApiError):
        code = grpc.StatusCode.UNAUTHENTICATED if exc.status == 401 else None
        return code or grpc.StatusCode.PERMISSION_DENIED, exc.message
    if isinstance(exc, (db.TenantNotFound, TopicGone)):
        return grpc.StatusCode.NOT_FOUND, f"ERROR_CODE_TENANT_NOT_FOUND: {exc}"
    if isinstance(exc, HistoryLost | SourceRewound):
        return grpc.StatusCode.INVALID_ARGUMENT, stream.lost(exc).message
    if isinstance(exc, json_format.Error | TypeError):  # e.g. an Any of an unknown type
        return grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {exc}"
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
        return grpc.StatusCode.UNAVAILABLE, "PostgreSQL is unreachable; retry"
    log.error("internal error", exc_info=exc)
    return grpc.StatusCode.INTERNAL, "internal server error"


def _doc(request: Message) -> dict:
    # no string in it holds a NUL: the server's interceptor (compat.grpc_nul) has refused those
    return json_format.MessageToDict(
        request, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


class _Base:
    def __init__(self, app: web.Application) -> None:
        self.app = app

    async def _ctx(self, context: grpc.aio.ServicerContext) -> ops.Ctx:
        return ops.Ctx(self.app[POOL], self.app[SETTINGS], authenticate(self.app, context))

    async def _unary(
        self,
        context: grpc.aio.ServicerContext,
        request: Message,
        response: type[Message],
        op: Callable[..., Awaitable[dict]],
        tenant_field: str | None = "tenant_id",
    ) -> Message:
        try:
            ctx = await self._ctx(context)
            doc = _doc(request)
            if tenant_field is None:
                result = await op(ctx, doc)
            else:
                result = await op(ctx, ops.tenant_of(doc.get(tenant_field), tenant_field), doc)
            return json_format.ParseDict(result, response(), ignore_unknown_fields=True)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await context.abort(*_status(exc))
            raise  # abort raises; this is for the type checker


class Tenancy(_Base, pb_grpc.TenancyServicer):
    async def Create(self, request, context):
        resp = pb.TenantCreateResponse
        return await self._unary(context, request, resp, ops.tenants_create, None)

    async def List(self, request, context):
        return await self._unary(context, request, pb.TenantListResponse, ops.tenants_list, None)

    async def Delete(self, request, context):
        async def delete(ctx: ops.Ctx, tenant: str, _doc: dict) -> dict:
            return await ops.tenants_delete(ctx, tenant)

        return await self._unary(context, request, pb.TenantDeleteResponse, delete, "id")


class Schema(_Base, pb_grpc.SchemaServicer):
    async def Write(self, request, context):
        return await self._unary(context, request, pb.SchemaWriteResponse, ops.schemas_write)

    async def Read(self, request, context):
        return await self._unary(context, request, pb.SchemaReadResponse, ops.schemas_read)

    async def List(self, request, context):
        return await self._unary(context, request, pb.SchemaListResponse, ops.schemas_list)


class Data(_Base, pb_grpc.DataServicer):
    async def Write(self, request, context):
        return await self._unary(context, request, pb.DataWriteResponse, ops.data_write)

    async def WriteRelationships(self, request, context):
        resp = pb.RelationshipWriteResponse
        return await self._unary(context, request, resp, ops.relationships_write)

    async def ReadRelationships(self, request, context):
        resp = pb.RelationshipReadResponse
        return await self._unary(context, request, resp, ops.relationships_read)

    async def ReadAttributes(self, request, context):
        return await self._unary(context, request, pb.AttributeReadResponse, ops.attributes_read)

    async def Delete(self, request, context):
        return await self._unary(context, request, pb.DataDeleteResponse, ops.data_delete)

    async def DeleteRelationships(self, request, context):
        resp = pb.RelationshipDeleteResponse
        return await self._unary(context, request, resp, ops.relationships_delete)


class Watch(_Base, pb_grpc.WatchServicer):
    async def Watch(self, request, context) -> AsyncIterator[pb.WatchResponse]:
        try:
            ctx = await self._ctx(context)
            doc = _doc(request)
            start = await stream.watch_start(ctx, ops.tenant_of(doc.get("tenant_id")), doc)
            # Initial metadata now says "anchored": every change after this is streamed.
            await context.send_initial_metadata(())
            async for item in stream.watch_changes(self.app[HUB], self.app[POOL], start, IDLE_S):
                if item is None:
                    continue  # a gone client cancels this task; nothing to check
                token, changes = item
                data = [pj.data_change(c) for c in changes]
                doc = {"changes": {"snap_token": token, "data_changes": data}}
                yield json_format.ParseDict(doc, pb.WatchResponse())
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await context.abort(*_status(exc))


class _NotServed(grpc.GenericRpcHandler):
    """UNIMPLEMENTED, with the reason, for the rest of Permify's ``base.v1`` API."""

    def service(self, handler_call_details):
        method = handler_call_details.method or ""
        if not method.startswith("/base.v1."):
            return None

        async def refuse(_request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{method} is not served: this is a change-stream service (Permify's Watch, "
                "Tenancy, Schema Write/Read/List and Data APIs); it does not evaluate "
                "permissions (Check, Expand, Lookup*) or run bundles.",
            )
            return b""

        return grpc.unary_unary_rpc_method_handler(refuse)


def build_server(app: web.Application) -> grpc.aio.Server:
    """The server with every servicer and no port yet (the caller binds it, insecure or
    with credentials: ``add_insecure_port`` / ``add_secure_port``)."""
    server = grpc.aio.server(
        interceptors=[RefuseNul()],
        options=[
            ("grpc.max_receive_message_length", app[SETTINGS].max_body_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    pb_grpc.add_TenancyServicer_to_server(Tenancy(app), server)
    pb_grpc.add_SchemaServicer_to_server(Schema(app), server)
    pb_grpc.add_DataServicer_to_server(Data(app), server)
    pb_grpc.add_WatchServicer_to_server(Watch(app), server)
    server.add_generic_rpc_handlers((_NotServed(),))
    return server


async def grpc_ctx(app: web.Application) -> AsyncIterator[None]:
    """The Permify gRPC server on ``settings.permify_grpc_port`` for the app's lifetime."""
    settings = app[SETTINGS]
    server = build_server(app)
    tls.add_port(server, f"{settings.host}:{settings.permify_grpc_port}", settings)
    await server.start()
    log.info("Permify gRPC surface on %s:%d", settings.host, settings.permify_grpc_port)
    try:
        yield
    finally:
        await server.stop(grace=1.0)
