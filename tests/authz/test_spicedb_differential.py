"""Differential tests: the same calls against our SpiceDB surface and a real SpiceDB running in
this process (``spicedb_real``), compared on status code and message, row by row.

Our surface serves a tenant of its own here (``spicedb_tenant``), so its schema starts empty
like the real instance's. Rows run in order and change both sides' state the same way.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import uuid

import grpc
import pytest
from authzed.api.v1 import (
    DeleteRelationshipsRequest,
    InsecureClient,
    ReadRelationshipsRequest,
    ReadSchemaRequest,
    RelationshipFilter,
    SubjectFilter,
    WatchRequest,
    WriteRelationshipsRequest,
    WriteSchemaRequest,
    ZedToken,
)
from authzed.api.v1.permission_service_pb2_grpc import PermissionsServiceStub
from authzed.api.v1.watch_service_pb2 import WATCH_KIND_INCLUDE_SCHEMA_UPDATES
from authzed.api.v1.watch_service_pb2_grpc import WatchServiceStub
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from watch_service.store import authz_writes as db
from watch_service.web.app_keys import POOL

from ..support import InProcessService, free_port
from .clients import GRPC_KEY
from .spicedb_real import RealError, RealSpiceDB, token_ahead
from .spicedb_support import Op, WatchReader, text, update
from .test_rewound_watch import spicedb_rewound

pytestmark = pytest.mark.service

SCHEMA = """definition user {}

definition group {
\trelation member: user
}

definition doc {
\trelation viewer: user | group#member | user:*
\trelation owner: user
\tpermission view = viewer + owner
}"""


@pytest.fixture(scope="module")
def real():
    r = RealSpiceDB()
    yield r
    r.close()


@pytest.fixture(scope="module")
async def ours(pg_url, base_settings, service):
    """Our surface on a tenant of its own (created through the shared service's pool)."""
    tenant = f"diff-{uuid.uuid4().hex[:8]}"
    async with service.app[POOL].connection() as conn:
        await db.create_tenant(conn, tenant, tenant, base_settings.authz_history_ms)
    settings = dataclasses.replace(
        base_settings, grpc_port=free_port(), grpc_key=GRPC_KEY, spicedb_tenant=tenant
    )
    svc = await InProcessService(settings, pg_url).start()
    client = InsecureClient(f"127.0.0.1:{settings.grpc_port}", GRPC_KEY)
    yield client
    await svc.stop()


def _ours(client, request) -> tuple[str, str]:
    method = {
        WriteSchemaRequest: client.WriteSchema,
        ReadSchemaRequest: client.ReadSchema,
        WriteRelationshipsRequest: client.WriteRelationships,
        DeleteRelationshipsRequest: client.DeleteRelationships,
    }[type(request)]
    try:
        resp = method(request)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details()
    return "OK", getattr(resp, "schema_text", "")


def _real(real: RealSpiceDB, request) -> tuple[str, str]:
    try:
        resp = real.call(request)
    except RealError as exc:
        return exc.code.name, exc.message
    return "OK", getattr(resp, "schema_text", "")


async def both(ours, real, request) -> tuple[tuple[str, str], tuple[str, str]]:
    return await asyncio.to_thread(_ours, ours, request), _real(real, request)


def touch(resource: str, relation: str, subject: str, op=Op.OPERATION_TOUCH):
    return WriteRelationshipsRequest(updates=[update(op, resource, relation, subject)])


BAD_SCHEMAS = [
    "definition user {}\ndefinition user {}",
    "definition user {}\ndefinition doc {\n relation viewer: nope\n}",
    "definition user {}\ndefinition doc {\n relation viewer: user#nope\n}",
    "definition user {}\ndefinition doc {\n relation viewer: user\n"
    " permission view = viewer + nope\n}",
    "definition user {}\ndefinition doc {\n relation viewer: user\n relation viewer: user\n}",
    "definition Bad {}",
    "definition us {}",
    "definition user {\n relation A: user\n}",
    "definition user {\n relation aa: user\n}",
    "definition user {\n relation reader: user relation b: user\n}",
]

# (what the row checks, request); rows run in this order, after SCHEMA is written
WRITES = [
    ("allowed direct subject", touch("doc:1", "viewer", "user:a")),
    ("allowed subject set", touch("doc:1", "viewer", "group:g#member")),
    ("allowed wildcard", touch("doc:1", "viewer", "user:*")),
    ("second resource", touch("doc:2", "owner", "user:b")),
    ("unknown resource type", touch("nope:1", "viewer", "user:a")),
    ("unknown relation", touch("doc:1", "nope", "user:a")),
    ("write to a permission", touch("doc:1", "view", "user:a")),
    ("disallowed subject type", touch("doc:1", "viewer", "doc:2")),
    ("subject type allowed only as a set", touch("doc:1", "viewer", "group:g")),
    ("unknown subject relation", touch("doc:1", "viewer", "group:g#nope")),
    ("disallowed subject set", touch("doc:1", "viewer", "doc:g#view")),
    ("wildcard not allowed", touch("doc:1", "owner", "user:*")),
    ("unknown subject type", touch("doc:1", "viewer", "nope:x")),
    ("CREATE of an existing one", touch("doc:1", "viewer", "user:a", Op.OPERATION_CREATE)),
    ("DELETE naming an unknown relation", touch("doc:1", "nope", "user:a", Op.OPERATION_DELETE)),
    (
        "the same relationship twice",
        WriteRelationshipsRequest(
            updates=[update(Op.OPERATION_TOUCH, "doc:1", "viewer", "user:a")] * 2
        ),
    ),
    (
        "over 1,000 updates",
        WriteRelationshipsRequest(
            updates=[
                update(Op.OPERATION_TOUCH, f"doc:x{i}", "viewer", "user:a") for i in range(1001)
            ]
        ),
    ),
    (
        "delete by filter on an unknown type",
        DeleteRelationshipsRequest(relationship_filter=RelationshipFilter(resource_type="nope")),
    ),
    (
        "delete by filter on an unknown relation",
        DeleteRelationshipsRequest(
            relationship_filter=RelationshipFilter(resource_type="doc", optional_relation="nope")
        ),
    ),
    (
        "delete over its limit without partial deletion",
        DeleteRelationshipsRequest(
            relationship_filter=RelationshipFilter(resource_type="doc"), optional_limit=1
        ),
    ),
    (
        "schema dropping a definition in use",
        WriteSchemaRequest(schema=SCHEMA.split("\n\ndefinition doc")[0]),
    ),
    (
        "schema dropping a relation in use",
        WriteSchemaRequest(
            schema=SCHEMA.replace("\trelation owner: user\n", "").replace(" + owner", "")
        ),
    ),
    (
        "schema dropping an allowed type in use",
        WriteSchemaRequest(schema=SCHEMA.replace("user | group#member", "group#member")),
    ),
    ("schema read back", ReadSchemaRequest()),
]


async def test_schema_validation_matrix(ours, real):
    """Every row: our code and message equal the real SpiceDB's on the same call."""
    rows = [
        ("no schema yet", ReadSchemaRequest()),
        ("write before any schema", touch("doc:1", "viewer", "user:a")),
    ]
    rows += [(f"bad schema {s!r}", WriteSchemaRequest(schema=s)) for s in BAD_SCHEMAS]
    rows += [("the schema", WriteSchemaRequest(schema=SCHEMA))] + WRITES
    mismatches = []
    for label, request in rows:
        got, want = await both(ours, real, request)
        if got != want:
            mismatches.append(f"{label}: ours {got} != real {want}")
    assert mismatches == []


def _read_status(channel_stub, f: RelationshipFilter) -> tuple[str, str, dict]:
    try:
        list(channel_stub.ReadRelationships(ReadRelationshipsRequest(relationship_filter=f)))
    except grpc.RpcError as exc:
        status = rpc_status.from_call(exc)
        info = error_details_pb2.ErrorInfo()
        assert status is not None and status.details[0].Unpack(info)
        return exc.code().name, exc.details(), {"reason": info.reason, **info.metadata}
    return "OK", "", {}


async def test_read_errors_carry_the_same_error_info(ours, real):
    """ReadRelationships reaches the real server over gRPC, so its ErrorInfo compares too."""
    for request in (WriteSchemaRequest(schema=SCHEMA),):
        await both(ours, real, request)
    real_stub = PermissionsServiceStub(real.channel())
    for f in (
        RelationshipFilter(resource_type="nope"),
        RelationshipFilter(resource_type="doc", optional_relation="nope"),
        RelationshipFilter(
            resource_type="doc", optional_subject_filter=SubjectFilter(subject_type="nope")
        ),
    ):
        got = await asyncio.to_thread(_read_status, ours, f)
        assert got == _read_status(real_stub, f)
        assert got[0] == "FAILED_PRECONDITION"


async def _changes(reader: WatchReader, n: int) -> list[tuple[bool, list[str]]]:
    return [
        (r.schema_updated, [f"{u.operation}:{text(u)}" for u in r.updates])
        for r in await reader.take(n)
    ]


async def test_watch_matches_real(ours, real):
    """Schema updates, a TOUCH that changes nothing and a 1,500-relationship revision arrive
    the same way from both servers: one response per revision, no event for the no-op."""
    await both(ours, real, WriteSchemaRequest(schema=SCHEMA))
    start = touch("doc:w", "viewer", "user:a")
    ours_at = (await asyncio.to_thread(ours.WriteRelationships, start)).written_at
    real_at = real.call(start).written_at
    kinds = [WATCH_KIND_INCLUDE_SCHEMA_UPDATES]
    readers = [
        WatchReader(ours, WatchRequest(optional_start_cursor=ours_at, optional_update_kinds=kinds)),
        WatchReader(
            RealWatchClient(real),
            WatchRequest(optional_start_cursor=real_at, optional_update_kinds=kinds),
        ),
    ]
    bigger = SCHEMA.replace("definition user {}", "definition user {}\n\ndefinition team {}")
    steps = [
        WriteSchemaRequest(schema=bigger),
        touch("doc:w", "viewer", "user:a"),  # already there: no change, so no event
        WriteRelationshipsRequest(
            updates=[
                update(Op.OPERATION_TOUCH, f"doc:b{i}", "viewer", "user:a") for i in range(1000)
            ]
        ),
        WriteRelationshipsRequest(
            updates=[
                update(Op.OPERATION_TOUCH, f"doc:c{i}", "viewer", "user:a") for i in range(500)
            ]
        ),
        DeleteRelationshipsRequest(
            relationship_filter=RelationshipFilter(resource_type="doc", optional_relation="viewer")
        ),
    ]
    try:
        for step in steps:
            got, want = await both(ours, real, step)
            assert got == want
        ours_got, real_got = [await _changes(r, 4) for r in readers]
    finally:
        for r in readers:
            r.close()
    shapes = [(schema, len(u)) for schema, u in ours_got]
    assert shapes[:3] == [(True, 0), (False, 1000), (False, 500)]
    assert shapes[3][1] > 1500  # one revision: every viewer relationship, in one response
    assert shapes == [(schema, len(u)) for schema, u in real_got]
    assert [sorted(u) for _, u in ours_got] == [sorted(u) for _, u in real_got]


class RealWatchClient:
    """The real server's Watch, shaped as ``WatchReader`` expects a client."""

    def __init__(self, real: RealSpiceDB) -> None:
        self.Watch = WatchServiceStub(real.channel()).Watch


def first_or_status(call) -> tuple:
    """The first response's relationship texts, or the status the call ended with."""
    try:
        for resp in call:
            return ("OK", [text(u) for u in resp.updates])
    except grpc.RpcError as exc:
        return (exc.code().name, exc.details())
    return ("EOF", [])


async def test_a_start_cursor_ahead_is_refused_where_the_real_one_skips_silently(ours, real):
    """A ZedToken ahead of the datastore (what a failover to a lagging replica or a restore
    leaves a client holding): the real SpiceDB accepts it and skips every change up to that
    revision without a word; ours refuses it with SpiceDB's status for an invalid revision."""
    await both(ours, real, WriteSchemaRequest(schema=SCHEMA))
    start = touch("doc:rw", "viewer", "user:r")
    ours_at = (await asyncio.to_thread(ours.WriteRelationships, start)).written_at
    real_at = real.call(start).written_at

    watch = WatchServiceStub(real.channel()).Watch
    ahead = ZedToken(token=token_ahead(real_at.token, 3600 * 10**9))
    skipping = watch(WatchRequest(optional_start_cursor=ahead), timeout=2)
    following = watch(WatchRequest(optional_start_cursor=real_at), timeout=10)
    real.call(touch("doc:rw2", "viewer", "user:r"))
    assert await asyncio.to_thread(first_or_status, following) == (
        "OK",
        ["doc:rw2#viewer@user:r"],
    )
    # Nothing arrives before the 2 s deadline ends the call. Which side ends it is a race: the
    # client's own deadline (DEADLINE_EXCEEDED) or the server, which sees the propagated deadline
    # end its context and closes the watch as canceled (CANCELLED, "watch canceled by user").
    ended = await asyncio.to_thread(first_or_status, skipping)
    assert ended[0] in ("DEADLINE_EXCEEDED", "CANCELLED"), ended

    seq, ours_ahead = ours_token_ahead(ours_at.token, 5)
    refused = ours.Watch(WatchRequest(optional_start_cursor=ours_ahead), timeout=10)
    code, message = spicedb_rewound(seq + 1, seq + 5)
    assert await asyncio.to_thread(first_or_status, refused) == (code.name, message)


def ours_token_ahead(token: str, ahead: int) -> tuple[int, ZedToken]:
    """(the seq of a ZedToken of ours, the token ``ahead`` seqs after it): the token is
    base64url of ``v1.<seq>.<tenant fingerprint>.<epoch>``."""
    version, seq, fingerprint, epoch = (
        base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split(".")
    )
    raw = f"{version}.{int(seq) + ahead}.{fingerprint}.{epoch}".encode()
    return int(seq), ZedToken(token=base64.urlsafe_b64encode(raw).decode().rstrip("="))
