"""The SpiceDB gRPC surface (seed 001): ``PermissionsService`` Write/Delete/Read/
ImportBulkRelationships and ``WatchService.Watch``, served by a ``grpc.aio`` server in the
service's own event loop on ``settings.grpc_port``, over tenant ``spicedb_proto.TENANT``.

Auth: the service's keys (``web.auth.KeyRing``, the same as every surface): with keys
configured every call carries metadata ``authorization: Bearer <key>`` (UNAUTHENTICATED
otherwise) of a key with the ``write`` (Write/Delete/Import) or ``read`` (Read/Watch) scope
whose prefixes cover the tenant's change topic (PERMISSION_DENIED otherwise). Writes go through
``store.authz_writes.apply`` (one transaction, one change record); Watch follows the tenant's change
topic, so a ZedToken is a position in it and ``changes_through`` is always resumable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import grpc
import psycopg
import psycopg_pool
from aiohttp import web
from authzed.api.v1 import core_pb2
from authzed.api.v1 import permission_service_pb2 as ps
from authzed.api.v1 import permission_service_pb2_grpc as ps_grpc
from authzed.api.v1 import watch_service_pb2 as ws
from authzed.api.v1 import watch_service_pb2_grpc as ws_grpc

from watch_service.compat import spicedb_proto as sp
from watch_service.engine.topic_follower import HistoryLost, TopicGone, ensure_retained, follow
from watch_service.protocol import authz as pa
from watch_service.protocol.errors import Forbidden, Unauthorized
from watch_service.store import authz_reads as reads
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import HUB, KEYS, POOL, SETTINGS

log = logging.getLogger("auditsync.spicedb")
TOPIC = pa.change_topic(sp.TENANT)
READ_PAGE = 1000
_Code = grpc.StatusCode


def _status(exc: Exception) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, sp.SpiceDBError):
        return exc.code, exc.message
    if isinstance(exc, db.TupleExists):
        return _Code.ALREADY_EXISTS, str(exc)
    if isinstance(exc, db.PreconditionFailed):
        return _Code.FAILED_PRECONDITION, str(exc)
    if isinstance(exc, (db.TenantNotFound, TopicGone)):
        return (
            _Code.NOT_FOUND,
            f"tenant {sp.TENANT!r} (the SpiceDB surface's tenant) does not exist",
        )
    if isinstance(exc, HistoryLost):
        return _Code.OUT_OF_RANGE, (
            f"the start cursor is before the retained history: changes {exc.gap_from}.."
            f"{exc.gap_to} were garbage collected (the history window is the change topic's "
            "ttl). Recover by re-reading the current state with ReadRelationships and then "
            "calling Watch without optional_start_cursor, or with the read_at token."
        )
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
        return _Code.UNAVAILABLE, "PostgreSQL is unreachable; retry"
    log.error("internal error", exc_info=exc)
    return _Code.INTERNAL, "internal server error"


class _Service:
    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.settings = app[SETTINGS]

    async def _call(self, context: grpc.aio.ServicerContext, coro, scope: str = "write"):
        """Run one unary handler: auth first, every failure as a gRPC status."""
        try:
            self._auth(context, scope)
            return await coro
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            coro.close()
            await context.abort(*_status(exc))

    def _auth(self, context: grpc.aio.ServicerContext, scope: str) -> None:
        try:
            self.app[KEYS].check(context.invocation_metadata(), scope, TOPIC)
        except Unauthorized as err:
            raise sp.SpiceDBError(
                _Code.UNAUTHENTICATED, f"{err.message} (metadata authorization: Bearer <key>)"
            ) from None
        except Forbidden as err:
            raise sp.SpiceDBError(_Code.PERMISSION_DENIED, err.message) from None

    async def _apply(self, w: db.Write) -> db.WriteResult:
        async with self.app[POOL].connection() as conn:
            return await db.apply(conn, sp.TENANT, "spicedb", w, self.settings.authz_history_ms)


class Permissions(_Service, ps_grpc.PermissionsServiceServicer):
    async def WriteRelationships(self, request, context):
        return await self._call(context, self._write(request))

    async def _write(self, request: ps.WriteRelationshipsRequest) -> ps.WriteRelationshipsResponse:
        w = db.Write(
            sp.updates(request), preconditions=_pre(request), metadata=sp.metadata(request)
        )
        result = await self._apply(w)
        return ps.WriteRelationshipsResponse(written_at=sp.zed(TOPIC, result.seq))

    async def DeleteRelationships(self, request, context):
        return await self._call(context, self._delete(request))

    async def _delete(
        self, request: ps.DeleteRelationshipsRequest
    ) -> ps.DeleteRelationshipsResponse:
        f = sp.to_filter(request.relationship_filter, "relationship_filter")
        w = db.Write(
            delete_tuples=f,
            delete_limit=request.optional_limit or None,
            allow_partial=request.optional_allow_partial_deletions,
            preconditions=_pre(request),
            metadata=sp.metadata(request),
        )
        result = await self._apply(w)
        progress = ps.DeleteRelationshipsResponse
        return ps.DeleteRelationshipsResponse(
            deleted_at=sp.zed(TOPIC, result.seq),
            relationships_deleted_count=result.deleted,
            deletion_progress=progress.DELETION_PROGRESS_PARTIAL
            if result.partial
            else progress.DELETION_PROGRESS_COMPLETE,
        )

    async def ReadRelationships(self, request, context) -> AsyncIterator:
        try:
            self._auth(context, "read")
            f = sp.to_filter(request.relationship_filter, "relationship_filter")
            after = (
                _cursor(request.optional_cursor.token) if request.optional_cursor.token else None
            )
            left = request.optional_limit or None
            async with self.app[POOL].connection() as conn:
                info = await db.ensure_topic(conn, sp.TENANT, self.settings.authz_history_ms)
            read_at = sp.zed(TOPIC, info.head_seq)
            while left is None or left > 0:
                size = READ_PAGE if left is None else min(READ_PAGE, left)
                async with self.app[POOL].connection() as conn:  # not held while streaming
                    rows = await reads.read_tuples(conn, sp.TENANT, f, after, size)
                for t in rows:
                    yield ps.ReadRelationshipsResponse(
                        read_at=read_at,
                        relationship=sp.to_relationship(t),
                        after_result_cursor=core_pb2.Cursor(token=_cursor_token(t)),
                    )
                if len(rows) < size:
                    return
                after = rows[-1].key()
                left = None if left is None else left - len(rows)
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await context.abort(*_status(exc))

    async def ImportBulkRelationships(self, request_iterator, context):
        return await self._call(context, self._import(request_iterator))

    async def _import(self, request_iterator) -> ps.ImportBulkRelationshipsResponse:
        ops, seen = [], set()
        async for req in request_iterator:
            for rel in req.relationships:
                t = sp.to_tuple(rel, f"relationships[{len(ops)}]")
                if t.key() in seen:
                    raise sp.SpiceDBError(
                        _Code.ALREADY_EXISTS,
                        f"relationship {pa.format_tuple(t)} appears twice in the import",
                    )
                if len(ops) >= sp.MAX_IMPORT:
                    raise sp.invalid(
                        f"relationships: more than {sp.MAX_IMPORT} in one import; "
                        "split it into several calls"
                    )
                seen.add(t.key())
                ops.append(("create", t))
        result = await self._apply(db.Write(ops))
        return ps.ImportBulkRelationshipsResponse(num_loaded=result.changes)


def _pre(request) -> list[db.Precondition]:
    return [
        db.Precondition(must, f) for must, f in sp.preconditions(request.optional_preconditions)
    ]


def _cursor_token(t: pa.Tuple) -> str:
    return pa.encode_token(TOPIC, 0) + "." + pa.format_tuple(t)


def _cursor(token: str) -> tuple[str, ...]:
    _, _, text = token.partition(".")
    try:
        return pa.parse_tuple(text).key()
    except pa.AuthzInputError:
        raise sp.invalid(f"optional_cursor: {token!r} is not a cursor from this server") from None


class Watch(_Service, ws_grpc.WatchServiceServicer):
    async def Watch(self, request, context) -> AsyncIterator[ws.WatchResponse]:
        try:
            self._auth(context, "read")
            async for resp in self._watch(request):
                yield resp
        except (grpc.aio.AbortError, asyncio.CancelledError):
            raise
        except Exception as exc:
            await context.abort(*_status(exc))

    async def _watch(self, request: ws.WatchRequest) -> AsyncIterator[ws.WatchResponse]:
        filters = sp.watch_filters(request)
        checkpoints = ws.WATCH_KIND_INCLUDE_CHECKPOINTS in request.optional_update_kinds
        interval = self.settings.spicedb_checkpoint_ms / 1000
        async with self.app[POOL].connection() as conn:
            info = await db.ensure_topic(conn, sp.TENANT, self.settings.authz_history_ms)
        after = info.head_seq
        if request.HasField("optional_start_cursor"):
            try:
                after = pa.decode_token(
                    TOPIC, request.optional_start_cursor.token, "optional_start_cursor"
                )
            except pa.AuthzInputError as exc:
                raise sp.invalid(str(exc)) from None
            if after > info.head_seq:
                raise sp.invalid(
                    "optional_start_cursor: the token is ahead of this server's "
                    "changes (from another datastore?)"
                )
            ensure_retained(after, info.earliest_seq)
        last_sent = time.monotonic()
        async for page in follow(
            self.app[HUB], self.app[POOL], TOPIC, after, interval if checkpoints else 30.0
        ):
            for rec in page:
                after = rec.seq
                resp = sp.watch_response(TOPIC, rec.seq, pa.parse_change_record(rec.data), filters)
                if resp is not None:
                    yield resp
                    last_sent = time.monotonic()
            if checkpoints and (not page or time.monotonic() - last_sent >= interval):
                yield sp.checkpoint(TOPIC, after)
                last_sent = time.monotonic()


async def grpc_ctx(app: web.Application) -> AsyncIterator[None]:
    """The grpc.aio server on ``settings.grpc_port`` for the app's lifetime."""
    settings = app[SETTINGS]
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ]
    )
    ps_grpc.add_PermissionsServiceServicer_to_server(Permissions(app), server)
    ws_grpc.add_WatchServiceServicer_to_server(Watch(app), server)
    server.add_insecure_port(f"{settings.host}:{settings.grpc_port}")
    await server.start()
    log.info(
        "SpiceDB gRPC surface on %s:%d (tenant %s)", settings.host, settings.grpc_port, sp.TENANT
    )
    try:
        yield
    finally:
        await server.stop(grace=1.0)
