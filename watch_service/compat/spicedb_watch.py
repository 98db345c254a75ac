"""SpiceDB ``WatchService.Watch`` (seed 001): follows the tenant's change topic, so a ZedToken
is a position in it and ``changes_through`` is always resumable.

One revision is one response, as in SpiceDB: the records one transaction appended (a big
write is split into parts of ``CHANGES_PER_RECORD`` changes in the topic) are gathered and
sent together, and no checkpoint is sent between the parts of one revision. Memory for that is
bounded by the largest transaction (``ImportBulkRelationships``' 100,000 relationships).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
from authzed.api.v1 import watch_service_pb2 as ws
from authzed.api.v1 import watch_service_pb2_grpc as ws_grpc

from watch_service.compat import spicedb_proto as sp
from watch_service.compat.spicedb_base import Base, abort
from watch_service.engine.topic_follower import ensure_not_rewound, ensure_retained, follow
from watch_service.protocol import authz as pa
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import HUB, POOL


class Watch(Base, ws_grpc.WatchServiceServicer):
    async def Watch(self, request, context) -> AsyncIterator[ws.WatchResponse]:
        try:
            self.auth(context, "read")
            async for resp in self._watch(request):
                yield resp
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort(context, exc)

    async def _watch(self, request: ws.WatchRequest) -> AsyncIterator[ws.WatchResponse]:
        filters = sp.watch_filters(request)
        kinds = set(request.optional_update_kinds)
        checkpoints = ws.WATCH_KIND_INCLUDE_CHECKPOINTS in kinds
        schema_updates = ws.WATCH_KIND_INCLUDE_SCHEMA_UPDATES in kinds
        interval = self.settings.spicedb_checkpoint_ms / 1000
        async with self.app[POOL].connection() as conn:
            info = await db.ensure_topic(conn, self.tenant, self.settings.authz_history_ms)
        epoch = pa.topic_epoch(info.created_at)
        after = info.head_seq
        if request.HasField("optional_start_cursor"):
            after = self.position(
                request.optional_start_cursor.token, "optional_start_cursor", epoch
            )
            ensure_not_rewound(after, info.head_seq)
            ensure_retained(after, info.earliest_seq)
        revision: list[pa.ChangeRecord] = []  # the parts of a revision not yet complete
        last_sent = time.monotonic()
        async for page in follow(
            self.app[HUB], self.app[POOL], self.topic, after, interval if checkpoints else 30.0
        ):
            for rec in page:
                parsed = pa.parse_change_record(rec.data)
                revision.append(parsed)
                if not parsed.ends_revision:
                    continue
                after = rec.seq
                token = sp.zed(self.topic, rec.seq, epoch)
                resp = sp.watch_response(token, revision, filters, schema_updates)
                revision = []
                if resp is not None:
                    yield resp
                    last_sent = time.monotonic()
            idle = not page or time.monotonic() - last_sent >= interval
            if checkpoints and idle and not revision:
                yield sp.checkpoint(sp.zed(self.topic, after, epoch))
                last_sent = time.monotonic()
