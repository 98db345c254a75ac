"""SpiceDB ``SchemaService``: WriteSchema / ReadSchema over the tenant's versioned SpiceDB
schema (``store.authz_schemas``, dialect ``spicedb``); a schema write is a revision of the
tenant's change topic, which Watch reports with ``WATCH_KIND_INCLUDE_SCHEMA_UPDATES``.

As in SpiceDB, a write that drops a definition or relation that still has relationships is
refused, and ReadSchema returns the canonical text. The reflection calls (DiffSchema,
ReflectSchema, …) and permission evaluation answer UNIMPLEMENTED via :func:`unimplemented`.
"""

from __future__ import annotations

import grpc
from authzed.api.v1 import schema_service_pb2 as ss
from authzed.api.v1 import schema_service_pb2_grpc as ss_grpc

from watch_service.compat import spicedb_proto as sp
from watch_service.compat.spicedb_base import DIALECT, Base
from watch_service.protocol import authz as pa
from watch_service.protocol import spicedb_checks as checks
from watch_service.protocol import spicedb_schema as schema_lang
from watch_service.store import authz_reads as reads
from watch_service.store import authz_schemas
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import POOL

SERVED = (
    "WriteRelationships, DeleteRelationships, ReadRelationships, ImportBulkRelationships, "
    "Watch, WriteSchema and ReadSchema"
)


def unimplemented(method: str, streaming: bool = False):
    """A handler answering UNIMPLEMENTED with a message that says why."""
    message = (
        f"{method} is not served: this is a change-stream service (auditsync), which keeps "
        f"and streams relationships and schemas but does not evaluate permissions; it serves "
        f"{SERVED}"
    )

    async def handler(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    async def stream_handler(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)
        yield  # pragma: no cover - makes this an async generator, as a streaming handler is

    return stream_handler if streaming else handler


class Schema(Base, ss_grpc.SchemaServiceServicer):
    async def WriteSchema(self, request, context):
        return await self.call(context, self._write(request), "admin")

    async def _write(self, request: ss.WriteSchemaRequest) -> ss.WriteSchemaResponse:
        new = checks.parse(request.schema)
        async with self.app[POOL].connection() as conn:
            for what, f in checks.removed(await self.schema(conn), new):
                found = await reads.read_tuples(conn, self.tenant, f, None, 1)
                if found:
                    exists = (
                        "a relationship exists with it"
                        if "allowed type" in what
                        else "at least one relationship exists under it"
                    )
                    raise sp.invalid(
                        f"cannot {what}, as {exists}: {pa.format_tuple(found[0])}",
                        "ERROR_REASON_SCHEMA_TYPE_ERROR",
                    )
            stored = await authz_schemas.write_schema(
                conn,
                self.tenant,
                DIALECT,
                request.schema,
                new.to_json(),
                self.settings.authz_history_ms,
            )
            assert stored.seq is not None  # set on every version written since migration 009
            return ss.WriteSchemaResponse(written_at=await self.zed(conn, stored.seq))

    async def ReadSchema(self, request, context):
        return await self.call(context, self._read(), "read")

    async def _read(self) -> ss.ReadSchemaResponse:
        async with self.app[POOL].connection() as conn:
            info = await db.ensure_topic(conn, self.tenant, self.settings.authz_history_ms)
            schema = await self.schema(conn)
            if schema is None or not schema.definitions:
                raise sp.SpiceDBError(grpc.StatusCode.NOT_FOUND, schema_lang.NO_SCHEMA)
            return ss.ReadSchemaResponse(
                schema_text=checks.canonical(schema),
                read_at=await self.zed(conn, info.head_seq),
            )


for _name in ("DiffSchema", "ReflectSchema", "ComputablePermissions", "DependentRelations"):
    if hasattr(ss_grpc.SchemaServiceServicer, _name):
        setattr(Schema, _name, unimplemented(_name))
