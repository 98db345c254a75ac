"""The SpiceDB gRPC surface (seed 001): ``PermissionsService`` Write/Delete/Read/
ImportBulkRelationships, ``WatchService.Watch`` (``spicedb_watch``) and ``SchemaService``
Write/ReadSchema (``spicedb_schema_service``), served by a ``grpc.aio`` server in the service's
own event loop on ``settings.grpc_port`` (TLS when configured, ``compat.tls``), over tenant
``settings.spicedb_tenant`` (default t1). Auth and error mapping: ``spicedb_base``.

Every write is validated against the tenant's current SpiceDB schema as SpiceDB validates it
(``protocol.spicedb_schema``), under the change topic's lock, then goes through
``store.authz_writes.apply`` (one transaction, one revision). Permission evaluation (Check,
Lookup*, Expand) is not served: those calls answer UNIMPLEMENTED saying why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import grpc
import psycopg
from aiohttp import web
from authzed.api.v1 import core_pb2
from authzed.api.v1 import permission_service_pb2 as ps
from authzed.api.v1 import permission_service_pb2_grpc as ps_grpc
from authzed.api.v1 import schema_service_pb2_grpc as ss_grpc
from authzed.api.v1 import watch_service_pb2_grpc as ws_grpc

from watch_service.compat import spicedb_proto as sp
from watch_service.compat import tls
from watch_service.compat.grpc_nul import RefuseNul
from watch_service.compat.spicedb_base import Base, abort, log
from watch_service.compat.spicedb_schema_service import Schema, unimplemented
from watch_service.compat.spicedb_watch import Watch
from watch_service.protocol import authz as pa
from watch_service.protocol import spicedb_checks as checks
from watch_service.store import authz_reads as reads
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import POOL, SETTINGS

READ_PAGE = 1000
_Code = grpc.StatusCode


class Permissions(Base, ps_grpc.PermissionsServiceServicer):
    CheckPermission = unimplemented("CheckPermission")
    CheckBulkPermissions = unimplemented("CheckBulkPermissions")
    ExpandPermissionTree = unimplemented("ExpandPermissionTree")
    LookupResources = unimplemented("LookupResources", streaming=True)
    LookupSubjects = unimplemented("LookupSubjects", streaming=True)
    ExportBulkRelationships = unimplemented("ExportBulkRelationships", streaming=True)

    def _validated(self, w: db.Write, tuples: list[pa.Tuple], filters: list[pa.TupleFilter]):
        async def check(conn: psycopg.AsyncConnection) -> None:
            schema = await self.schema(conn)
            for t in tuples:
                checks.check_tuple(schema, t)
            for f in filters:
                checks.check_filter(schema, f)

        return dataclasses.replace(w, check=check)

    async def _apply(self, w: db.Write) -> core_pb2.ZedToken:
        async with self.app[POOL].connection() as conn:
            result = await db.apply(conn, self.tenant, "spicedb", w, self.settings.authz_history_ms)
        return sp.zed(self.topic, result.seq, result.epoch)

    async def WriteRelationships(self, request, context):
        return await self.call(context, self._write(request))

    async def _write(self, request: ps.WriteRelationshipsRequest) -> ps.WriteRelationshipsResponse:
        ups, pre = sp.updates(request), _pre(request)
        w = db.Write(ups, preconditions=pre, metadata=sp.metadata(request))
        w = self._validated(w, [t for _, t in ups], [p.filter for p in pre])
        return ps.WriteRelationshipsResponse(written_at=await self._apply(w))

    async def DeleteRelationships(self, request, context):
        return await self.call(context, self._delete(request))

    async def _delete(
        self, request: ps.DeleteRelationshipsRequest
    ) -> ps.DeleteRelationshipsResponse:
        f = sp.to_filter(request.relationship_filter, "relationship_filter")
        pre = _pre(request)
        w = db.Write(
            delete_tuples=f,
            delete_limit=request.optional_limit or None,
            allow_partial=request.optional_allow_partial_deletions,
            preconditions=pre,
            metadata=sp.metadata(request),
        )
        w = self._validated(w, [], [f, *(p.filter for p in pre)])
        async with self.app[POOL].connection() as conn:
            result = await db.apply(conn, self.tenant, "spicedb", w, self.settings.authz_history_ms)
        token = sp.zed(self.topic, result.seq, result.epoch)
        progress = ps.DeleteRelationshipsResponse
        return ps.DeleteRelationshipsResponse(
            deleted_at=token,
            relationships_deleted_count=result.deleted,
            deletion_progress=progress.DELETION_PROGRESS_PARTIAL
            if result.partial
            else progress.DELETION_PROGRESS_COMPLETE,
        )

    async def ReadRelationships(self, request, context) -> AsyncIterator:
        try:
            self.auth(context, "read")
            async for resp in self._read(request):
                yield resp
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort(context, exc)

    async def _read(self, request: ps.ReadRelationshipsRequest) -> AsyncIterator:
        f = sp.to_filter(request.relationship_filter, "relationship_filter")
        after = _cursor(request.optional_cursor.token) if request.optional_cursor.token else None
        left = request.optional_limit or None
        async with self.app[POOL].connection() as conn:
            info = await db.ensure_topic(conn, self.tenant, self.settings.authz_history_ms)
            schema = await self.schema(conn)
        epoch = pa.topic_epoch(info.created_at)
        self._consistency(request.consistency, info.head_seq, epoch)
        checks.check_filter(schema, f)
        read_at = sp.zed(self.topic, info.head_seq, epoch)
        while left is None or left > 0:
            size = READ_PAGE if left is None else min(READ_PAGE, left)
            async with self.app[POOL].connection() as conn:  # not held while streaming
                rows = await reads.read_tuples(conn, self.tenant, f, after, size)
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

    def _consistency(self, c: ps.Consistency, head: int, epoch: str) -> None:
        """Reads here are of the current state, which satisfies minimize_latency,
        fully_consistent and at_least_as_fresh (of a token this tenant issued, not ahead of
        it); at_exact_snapshot of an older revision cannot be served and is refused."""
        kind = c.WhichOneof("requirement")
        if kind not in ("at_least_as_fresh", "at_exact_snapshot"):
            return
        token = getattr(c, kind).token
        seq = self.position(token, f"consistency.{kind}", epoch)
        if seq > head:
            raise sp.invalid(f"consistency.{kind}: the ZedToken is ahead of this server's changes")
        if kind == "at_exact_snapshot":
            raise sp.SpiceDBError(
                _Code.FAILED_PRECONDITION,
                "consistency.at_exact_snapshot is not supported: this server keeps the current "
                "relationships only, not past snapshots; use at_least_as_fresh with the same "
                "token (the answer is then at least that fresh) or fully_consistent",
            )

    async def ImportBulkRelationships(self, request_iterator, context):
        return await self.call(context, self._import(request_iterator))

    async def _import(self, request_iterator) -> ps.ImportBulkRelationshipsResponse:
        ops: list[tuple[str, pa.Tuple]] = []
        seen: set[tuple[str, ...]] = set()
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
        w = self._validated(db.Write(ops), [t for _, t in ops], [])
        async with self.app[POOL].connection() as conn:
            result = await db.apply(conn, self.tenant, "spicedb", w, self.settings.authz_history_ms)
        return ps.ImportBulkRelationshipsResponse(num_loaded=result.changes)


def _pre(request) -> list[db.Precondition]:
    return [
        db.Precondition(must, f) for must, f in sp.preconditions(request.optional_preconditions)
    ]


def _cursor_token(t: pa.Tuple) -> str:
    return "c1." + pa.format_tuple(t)


def _cursor(token: str) -> tuple[str, ...]:
    _, _, text = token.partition(".")
    try:
        return pa.parse_tuple(text).key()
    except pa.AuthzInputError:
        raise sp.invalid(
            f"optional_cursor: {token!r} is not a cursor from this server",
            "ERROR_REASON_INVALID_CURSOR",
        ) from None


async def grpc_ctx(app: web.Application) -> AsyncIterator[None]:
    """The grpc.aio server on ``settings.grpc_port`` for the app's lifetime."""
    settings = app[SETTINGS]
    server = grpc.aio.server(
        interceptors=[RefuseNul()],
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    ps_grpc.add_PermissionsServiceServicer_to_server(Permissions(app), server)
    ws_grpc.add_WatchServiceServicer_to_server(Watch(app), server)
    ss_grpc.add_SchemaServiceServicer_to_server(Schema(app), server)
    tls.add_port(server, f"{settings.host}:{settings.grpc_port}", settings)
    await server.start()
    log.info(
        "SpiceDB gRPC surface on %s:%d (tenant %s, %s)",
        settings.host,
        settings.grpc_port,
        settings.spicedb_tenant,
        "TLS" if settings.grpc_tls_cert else "plaintext",
    )
    try:
        yield
    finally:
        await server.stop(grace=1.0)
