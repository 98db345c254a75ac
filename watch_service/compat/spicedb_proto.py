"""SpiceDB v1 messages (the ``authzed`` package's protos), pure: requests into
``protocol.authz`` values and change records into ``WatchResponse``s. ``SpiceDBError`` is this
surface's one error type (a gRPC status code and a message).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from authzed.api.v1 import core_pb2
from authzed.api.v1 import permission_service_pb2 as ps
from authzed.api.v1 import watch_service_pb2 as ws
from google.protobuf import json_format, struct_pb2

from watch_service.protocol import authz as pa
from watch_service.protocol.errors import AuditsyncError

MAX_UPDATES = 1000
MAX_IMPORT = 100_000

_Op = core_pb2.RelationshipUpdate
OPS = {_Op.OPERATION_CREATE: "create", _Op.OPERATION_TOUCH: "touch", _Op.OPERATION_DELETE: "delete"}
OPS_BACK = {v: k for k, v in OPS.items()}


class SpiceDBError(AuditsyncError):
    """A status for the client: code, message and, when SpiceDB sends one, the ErrorInfo
    ``reason`` (an ``ErrorReason`` name) and its ``metadata``."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str = "",
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.reason, self.metadata = reason, metadata or {}


def invalid(message: str, reason: str = "", metadata: dict[str, str] | None = None) -> SpiceDBError:
    return SpiceDBError(grpc.StatusCode.INVALID_ARGUMENT, message, reason, metadata)


def to_tuple(rel: core_pb2.Relationship, field: str) -> pa.Tuple:
    if rel.HasField("optional_caveat") or rel.HasField("optional_expires_at"):
        raise invalid(f"{field}: caveats and expiration are not supported by this server")
    s = rel.subject
    t = pa.Tuple(
        rel.resource.object_type,
        rel.resource.object_id,
        rel.relation,
        s.object.object_type,
        s.object.object_id,
        s.optional_relation,
    )
    try:
        return pa.check_tuple(t, pa.SPICEDB, field)
    except pa.AuthzInputError as exc:
        raise invalid(str(exc)) from None


def to_relationship(t: pa.Tuple) -> core_pb2.Relationship:
    return core_pb2.Relationship(
        resource=core_pb2.ObjectReference(object_type=t.entity_type, object_id=t.entity_id),
        relation=t.relation,
        subject=core_pb2.SubjectReference(
            object=core_pb2.ObjectReference(object_type=t.subject_type, object_id=t.subject_id),
            optional_relation=t.subject_relation,
        ),
    )


def to_filter(f: ps.RelationshipFilter, field: str) -> pa.TupleFilter:
    sf = f.optional_subject_filter
    has_subject = f.HasField("optional_subject_filter")
    out = pa.TupleFilter(
        entity_type=f.resource_type or None,
        entity_ids=(f.optional_resource_id,) if f.optional_resource_id else (),
        entity_id_prefix=f.optional_resource_id_prefix or None,
        relation=f.optional_relation or None,
        subject_type=(sf.subject_type or None) if has_subject else None,
        subject_ids=(sf.optional_subject_id,) if has_subject and sf.optional_subject_id else (),
        subject_relation=sf.optional_relation.relation
        if has_subject and sf.HasField("optional_relation")
        else None,
    )
    if out.is_empty():
        raise invalid(f"{field}: at least one field of the filter must be set")
    if out.entity_ids and out.entity_id_prefix:
        raise invalid(
            f"{field}: optional_resource_id and optional_resource_id_prefix cannot both be set"
        )
    return out


def updates(req: ps.WriteRelationshipsRequest) -> list[tuple[str, pa.Tuple]]:
    if len(req.updates) > MAX_UPDATES:
        raise invalid(
            f"too many updates ({len(req.updates)}) for WriteRelationships call (maximum: "
            f"{MAX_UPDATES}); consider using ImportBulkRelationships API instead",
            "ERROR_REASON_TOO_MANY_UPDATES_IN_REQUEST",
            {"update_count": str(len(req.updates)), "update_limit": str(MAX_UPDATES)},
        )
    out, seen = [], set()
    for i, u in enumerate(req.updates):
        op = OPS.get(u.operation)
        if op is None:
            raise invalid(f"updates[{i}].operation: must be CREATE, TOUCH or DELETE")
        t = to_tuple(u.relationship, f"updates[{i}].relationship")
        if t.key() in seen:
            text = pa.format_tuple(t)
            raise invalid(
                f"found more than one update with relationship `{text}` in this request; "
                "a relationship can only be specified in an update once per overall "
                "WriteRelationships request",
                "ERROR_REASON_UPDATES_ON_SAME_RELATIONSHIP",
                {"definition_name": t.entity_type, "relationship": text},
            )
        seen.add(t.key())
        out.append((op, t))
    return out


def preconditions(items: Sequence[ps.Precondition]) -> list[tuple[bool, pa.TupleFilter]]:
    out = []
    for i, p in enumerate(items):
        if p.operation not in (
            ps.Precondition.OPERATION_MUST_MATCH,
            ps.Precondition.OPERATION_MUST_NOT_MATCH,
        ):
            raise invalid(
                f"optional_preconditions[{i}].operation: must be MUST_MATCH or MUST_NOT_MATCH"
            )
        must = p.operation == ps.Precondition.OPERATION_MUST_MATCH
        out.append((must, to_filter(p.filter, f"optional_preconditions[{i}].filter")))
    return out


def metadata(msg, field: str = "optional_transaction_metadata") -> dict | None:
    if not msg.HasField(field):
        return None
    return json_format.MessageToDict(getattr(msg, field))


def struct(doc: dict) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(doc)
    return s


def watch_filters(req: ws.WatchRequest) -> list[pa.TupleFilter]:
    """The filters a relationship must match one of; [] = every relationship."""
    if req.optional_object_types and req.optional_relationship_filters:
        raise invalid("optional_object_types and optional_relationship_filters cannot both be set")
    for i, kind in enumerate(req.optional_update_kinds):
        if kind not in ws.WatchKind.values():
            raise invalid(f"optional_update_kinds[{i}]: unknown watch kind {kind}")
    for i, t in enumerate(req.optional_object_types):
        if not pa.SPICEDB.type_re.fullmatch(t):
            raise invalid(f"optional_object_types[{i}]: {t!r} is not a valid object type")
    if req.optional_object_types:
        return [pa.TupleFilter(entity_type=t) for t in req.optional_object_types]
    return [
        to_filter(f, f"optional_relationship_filters[{i}]")
        for i, f in enumerate(req.optional_relationship_filters)
    ]


def zed(topic: str, seq: int, epoch: str = "") -> core_pb2.ZedToken:
    return core_pb2.ZedToken(token=pa.encode_token(topic, seq, epoch))


def watch_response(
    token: core_pb2.ZedToken,
    recs: Sequence[pa.ChangeRecord],
    filters: list[pa.TupleFilter],
    schema_updates: bool = False,
) -> ws.WatchResponse | None:
    """The one response for one revision (the record(s) one transaction appended), or None
    when nothing in it is for this watcher: no relationship passes the filters and it is not
    a SpiceDB schema change the watcher asked for (attribute changes are Permify-only)."""
    ups = [
        core_pb2.RelationshipUpdate(operation=OPS_BACK[c.op], relationship=to_relationship(c.tuple))
        for rec in recs
        for c in rec.changes
        if c.tuple is not None and (not filters or any(pa.matches(f, c.tuple) for f in filters))
    ]
    schema = schema_updates and any(
        r.schema is not None and r.schema.dialect == "spicedb" for r in recs
    )
    if not ups and not schema:
        return None
    resp = ws.WatchResponse(updates=ups, changes_through=token, schema_updated=schema)
    metadata = recs[0].metadata
    if metadata is not None:
        resp.optional_transaction_metadata.CopyFrom(struct(metadata))
        resp.full_revision_metadata.append(struct(metadata))
    return resp


def checkpoint(token: core_pb2.ZedToken) -> ws.WatchResponse:
    return ws.WatchResponse(is_checkpoint=True, changes_through=token)
