"""What every SpiceDB service of this surface shares: the tenant, authentication, the mapping
of failures to gRPC statuses with SpiceDB's ``ErrorInfo`` details, the tenant's current schema,
and ZedTokens that carry the tenant's incarnation.

Auth uses the service's keys (``AUDITSYNC_KEYS_FILE``, the same keys and scopes as every
surface) with SpiceDB's answers: metadata ``authorization: <scheme> <key>`` with the scheme
``bearer`` in any case; none (or another scheme) is UNAUTHENTICATED; an unknown key, a missing
scope (``write`` for writes, ``read`` for reads and Watch, ``admin`` for WriteSchema) or a key
whose prefixes miss the tenant's change topic is PERMISSION_DENIED.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import grpc
import psycopg
import psycopg_pool
from aiohttp import web
from google.rpc import error_details_pb2, status_pb2

from watch_service.compat import spicedb_proto as sp
from watch_service.engine.topic_follower import HistoryLost, SourceRewound, TopicGone
from watch_service.protocol import authz as pa
from watch_service.protocol import spicedb_checks as checks
from watch_service.protocol import spicedb_schema as schema_lang
from watch_service.protocol.errors import AuditsyncError, Forbidden, Unauthorized
from watch_service.store import authz_reads as reads
from watch_service.store import authz_schemas
from watch_service.store import authz_writes as db
from watch_service.web.app_keys import KEYS, SETTINGS
from watch_service.web.auth import authorize, metadata_authorization

log = logging.getLogger("auditsync.spicedb")
DIALECT = "spicedb"
_Code = grpc.StatusCode


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The key of ``authorization: bearer <key>`` (scheme in any case, as SpiceDB accepts it),
    or None when there is no such header."""
    scheme, _, key = (metadata_authorization(metadata) or "").strip().partition(" ")
    return key.strip() if scheme.lower() == "bearer" and key.strip() else None


class Stale(AuditsyncError):
    """A token from an earlier incarnation of the tenant (deleted and re-created since)."""


def status(exc: Exception) -> tuple[grpc.StatusCode, str, error_details_pb2.ErrorInfo | None]:
    """The gRPC status, message and ErrorInfo (if SpiceDB sends one) for a failure."""
    if isinstance(exc, sp.SpiceDBError):
        return exc.code, exc.message, _info(exc.reason, exc.metadata)
    if isinstance(exc, schema_lang.SchemaError):
        return _Code[exc.code], exc.message, _info(exc.reason, exc.metadata)
    if isinstance(exc, db.TupleExists):
        text = pa.format_tuple(exc.tuple)
        return (
            _Code.ALREADY_EXISTS,
            f"could not CREATE relationship `{text}`, as it already existed. If this is "
            "persistent, please switch to TOUCH operations or specify a precondition",
            _info("ERROR_REASON_ATTEMPT_TO_RECREATE_RELATIONSHIP", {"relationship": text}),
        )
    if isinstance(exc, db.DeleteLimitExceeded):
        return (
            _Code.INVALID_ARGUMENT,
            str(exc),
            _info(
                "ERROR_REASON_TOO_MANY_RELATIONSHIPS_FOR_TRANSACTIONAL_DELETE",
                {"limit": str(exc.limit)},
            ),
        )
    if isinstance(exc, db.PreconditionFailed):
        return (
            _Code.FAILED_PRECONDITION,
            str(exc),
            _info("ERROR_REASON_WRITE_OR_DELETE_PRECONDITION_FAILURE", {}),
        )
    if isinstance(exc, (db.TenantNotFound, TopicGone)):
        return _Code.NOT_FOUND, "this surface's tenant does not exist (deleted?)", None
    if isinstance(exc, HistoryLost):
        return (
            _Code.OUT_OF_RANGE,
            f"the start cursor is before the retained history: changes {exc.gap_from}.."
            f"{exc.gap_to} were garbage collected (the history window is the change topic's "
            "ttl). Recover by re-reading the current state with ReadRelationships and then "
            "calling Watch without optional_start_cursor, or with the read_at token.",
            None,
        )
    if isinstance(exc, SourceRewound):
        # SpiceDB's status for a ZedToken ahead of its datastore (InvalidRevisionError,
        # RevisionInFuture), where it checks one; its Watch does not, and waits silently.
        return (
            _Code.OUT_OF_RANGE,
            "invalid zedtoken: revision was invalid: the watch's position (its start cursor, "
            "or the last revision it sent) is ahead of this datastore's newest revision; "
            f"changes {exc.gap_from}..{exc.gap_to} are no longer here (the datastore went back: "
            "a failover to a lagging replica, or a restore) and are written again with other "
            "content. Recover by re-reading the current state with ReadRelationships and then "
            "calling Watch with its read_at token.",
            None,
        )
    if isinstance(exc, Stale):
        return (
            _Code.OUT_OF_RANGE,
            "the ZedToken was issued before this surface's tenant was deleted and re-created: "
            "every relationship it had seen is gone. Recover by re-reading the current state "
            "with ReadRelationships and then calling Watch with its read_at token (or without "
            "optional_start_cursor).",
            None,
        )
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
        return _Code.UNAVAILABLE, "PostgreSQL is unreachable; retry", None
    log.error("internal error", exc_info=exc)
    return _Code.INTERNAL, "internal server error", None


def _info(reason: str, metadata: dict[str, str]) -> error_details_pb2.ErrorInfo | None:
    if not reason:
        return None
    return error_details_pb2.ErrorInfo(reason=reason, domain="authzed.com", metadata=metadata)


async def abort(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    """End the call with ``exc``'s status, the ErrorInfo in ``grpc-status-details-bin``."""
    code, message, info = status(exc)
    trailers: tuple = ()
    if info is not None:
        st = status_pb2.Status(code=code.value[0], message=message)
        st.details.add().Pack(info)
        trailers = (("grpc-status-details-bin", st.SerializeToString()),)
    await context.abort(code, message, trailers)


class Base:
    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.settings = app[SETTINGS]
        self.tenant = self.settings.spicedb_tenant
        self.topic = pa.change_topic(self.tenant)
        self._schema: tuple[str, schema_lang.Schema] | None = None  # (version, parsed)

    async def call(self, context: grpc.aio.ServicerContext, coro, scope: str = "write"):
        """Run one unary handler: auth (``scope`` on the tenant's change topic) first, every
        failure as a gRPC status."""
        try:
            self.auth(context, scope)
            return await coro
        except grpc.aio.AbortError:
            raise
        except BaseException as exc:
            coro.close()
            if not isinstance(exc, Exception):
                raise
            await abort(context, exc)

    def auth(self, context: grpc.aio.ServicerContext, scope: str) -> None:
        """The service's keys, as on every surface (``web.auth.KeyRing``), answered as SpiceDB
        answers: no bearer key is UNAUTHENTICATED; an unknown key, a missing scope or a key
        whose prefixes do not cover the tenant's change topic is PERMISSION_DENIED."""
        keys = self.app[KEYS]
        if not keys.enabled:
            return  # dev mode: no keys configured
        token = bearer_token(context.invocation_metadata())
        if token is None:
            raise sp.SpiceDBError(_Code.UNAUTHENTICATED, "Request unauthenticated with bearer")
        try:
            key = keys.authenticate(f"Bearer {token}")
        except Unauthorized:
            raise sp.SpiceDBError(
                _Code.PERMISSION_DENIED, "invalid preshared key: invalid token"
            ) from None
        try:
            authorize(key, scope, self.topic)
        except Forbidden as err:
            raise sp.SpiceDBError(_Code.PERMISSION_DENIED, err.message) from None

    async def schema(self, conn: psycopg.AsyncConnection) -> schema_lang.Schema | None:
        """The tenant's current SpiceDB schema, None before the first WriteSchema. The parsed
        form of the latest version is kept (one entry), so a write reads only the version id."""
        version = await reads.latest_schema_version(conn, self.tenant, DIALECT)
        if version is None:
            return None
        if self._schema is not None and self._schema[0] == version:
            return self._schema[1]
        stored = await authz_schemas.read_schema(conn, self.tenant, DIALECT, version)
        if stored is None:
            return None
        if stored.definitions is None:
            parsed = checks.parse(stored.source)
        else:
            parsed = schema_lang.Schema.from_json(stored.definitions)
        self._schema = (version, parsed)
        return parsed

    async def zed(self, conn: psycopg.AsyncConnection, seq: int) -> sp.core_pb2.ZedToken:
        """A ZedToken for ``seq`` of this incarnation of the tenant."""
        info = await db.ensure_topic(conn, self.tenant, self.settings.authz_history_ms)
        return sp.zed(self.topic, seq, pa.topic_epoch(info.created_at))

    def position(self, token: str, field: str, epoch: str) -> int:
        """The seq a client's ZedToken names; raises Stale for one from before the tenant
        was deleted and re-created (``epoch`` is the current incarnation's), SpiceDBError for
        one that is not ours."""
        try:
            return pa.decode_token(self.topic, token, field, epoch)
        except pa.TokenFromEarlierTenant:
            raise Stale() from None
        except pa.AuthzInputError as exc:
            raise sp.invalid(str(exc)) from None
