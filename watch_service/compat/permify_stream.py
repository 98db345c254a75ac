"""The Permify Watch operation both transports stream (seed 000): ``watch_start`` checks
everything before a stream starts (the seed's error codes) and ``watch_changes`` yields each
change record of the tenant's change topic after it, as (snap_token, data changes). The REST
NDJSON stream (``permify_watch``) and the gRPC ``Watch.Watch`` (``permify_grpc``) only frame
them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from psycopg_pool import AsyncConnectionPool

from watch_service.compat import permify_json as pj
from watch_service.compat.permify_ops import Ctx, allow
from watch_service.engine.hub import Hub
from watch_service.engine.topic_follower import (
    HistoryLost,
    SourceRewound,
    ensure_not_rewound,
    ensure_retained,
    follow,
)
from watch_service.protocol import authz as pa
from watch_service.store import authz_writes as db
from watch_service.store.server_state import commit_timestamps_on


@dataclasses.dataclass(frozen=True)
class WatchStart:
    topic: str
    after: int
    epoch: str


async def watch_start(ctx: Ctx, tenant: str, doc: dict) -> WatchStart:
    """Everything checked before a watch streams (seed 000's error codes)."""
    allow(ctx, "read", tenant)
    token = pj.text(doc, "snap_token", "")
    if not ctx.settings.permify_watch_enabled:
        raise pj.PermifyError(
            pj.UNAVAILABLE,
            "the watch service is disabled on this server (AUDITSYNC_PERMIFY_WATCH=false)",
        )
    topic = pa.change_topic(tenant)
    async with ctx.pool.connection() as conn:
        if not await commit_timestamps_on(conn):
            raise pj.PermifyError(
                pj.UNAVAILABLE,
                "PostgreSQL is not configured for watch: track_commit_timestamp is off "
                "(ALTER SYSTEM SET track_commit_timestamp = on; then restart it)",
            )
        info = await db.ensure_topic(conn, tenant, ctx.settings.authz_history_ms)
    epoch = pa.topic_epoch(info.created_at)
    try:
        after = pa.decode_token(topic, token, "snap_token", epoch) if token else info.head_seq
    except pa.AuthzInputError as exc:
        raise pj.invalid(str(exc)) from None
    try:
        ensure_not_rewound(after, info.head_seq)
        ensure_retained(after, info.earliest_seq)
    except (HistoryLost, SourceRewound) as exc:
        raise lost(exc) from None
    return WatchStart(topic, after, epoch)


def lost(exc: HistoryLost | SourceRewound) -> pj.PermifyError:
    """The error a watch ends with (or is refused with) when its position has no history to
    follow: INVALID_ARGUMENT, the seed's code for an invalid request field (a real Permify
    would follow such a snap_token silently, and stream nothing)."""
    if isinstance(exc, SourceRewound):
        return pj.invalid(
            "snap_token is ahead of this tenant's changes: changes "
            f"{exc.gap_from}..{exc.gap_to} are no longer here (the database went back: a "
            "failover to a lagging replica, or a restore) and are written again with other "
            "content. Re-read the current state with data/relationships/read and "
            "data/attributes/read, then watch without a snap_token (from now)."
        )
    return pj.invalid(history_message(exc))


def history_message(exc: HistoryLost) -> str:
    return (
        f"snap_token is before the retained history: changes {exc.gap_from}..{exc.gap_to} "
        "are gone (the history window is the change topic's ttl). Re-read the current state "
        "with data/relationships/read and data/attributes/read, then watch without a "
        "snap_token (from now)."
    )


async def watch_changes(
    hub: Hub, pool: AsyncConnectionPool, start: WatchStart, idle_s: float
) -> AsyncIterator[tuple[str, list[pa.Change]] | None]:
    """(snap_token, data changes) per change record after ``start``, in order; None when idle
    for ``idle_s``. Schema records carry no data change and are not streamed (Permify's watch
    streams DataChanges only). A change whose names Permify cannot represent (written through
    the SpiceDB surface) ends the watch with an error naming it and the token to resume after
    it: never emitted as if valid, never silently dropped."""
    async for page in follow(hub, pool, start.topic, start.after, idle_s):
        if not page:
            yield None
        for rec in page:
            changes = pa.parse_change_record(rec.data).changes
            token = pa.encode_token(start.topic, rec.seq, start.epoch)
            bad = pj.unrepresentable(changes)
            if bad:
                raise pj.PermifyError(
                    pj.FAILED_PRECONDITION,
                    f"the change at snap_token {token!r} has names Permify cannot represent "
                    f"({bad}); it was written through the SpiceDB surface. Resume with "
                    f"snap_token {token!r} to continue after it.",
                )
            if changes:
                yield token, changes
