"""Building SpiceDB requests and reading Watch streams with the official ``authzed`` client."""

from __future__ import annotations

import asyncio
import queue
import threading
from types import SimpleNamespace

import grpc
from authzed.api.v1 import (
    InsecureClient,
    ObjectReference,
    ReadSchemaRequest,
    Relationship,
    RelationshipUpdate,
    SubjectReference,
    WatchRequest,
    WriteRelationshipsRequest,
    WriteSchemaRequest,
)
from authzed.api.v1.permission_service_pb2_grpc import PermissionsServiceStub
from authzed.api.v1.watch_service_pb2_grpc import WatchServiceStub
from google.protobuf.struct_pb2 import Struct

from .clients import unique_type

Op = RelationshipUpdate.Operation


def rel(resource: str, relation: str, subject: str) -> Relationship:
    rt, rid = resource.split(":", 1)
    st, sid = subject.split(":", 1)
    sid, _, srel = sid.partition("#")
    return Relationship(
        resource=ObjectReference(object_type=rt, object_id=rid),
        relation=relation,
        subject=SubjectReference(
            object=ObjectReference(object_type=st, object_id=sid), optional_relation=srel
        ),
    )


def update(op, resource: str, relation: str, subject: str) -> RelationshipUpdate:
    return RelationshipUpdate(operation=op, relationship=rel(resource, relation, subject))


def struct(doc: dict) -> Struct:
    s = Struct()
    s.update(doc)
    return s


def write(client: InsecureClient, *updates, metadata: dict | None = None, preconditions=()):
    req = WriteRelationshipsRequest(updates=updates, optional_preconditions=preconditions)
    if metadata is not None:
        req.optional_transaction_metadata.CopyFrom(struct(metadata))
    return asyncio.to_thread(client.WriteRelationships, req)


def text(resp_update) -> str:
    r = resp_update.relationship
    tail = f"#{r.subject.optional_relation}" if r.subject.optional_relation else ""
    return (
        f"{r.resource.object_type}:{r.resource.object_id}#{r.relation}@"
        f"{r.subject.object.object_type}:{r.subject.object.object_id}{tail}"
    )


class WatchReader:
    """One Watch call drained by a thread into a queue; ``take`` awaits responses."""

    def __init__(self, client: InsecureClient, request: WatchRequest) -> None:
        self.call = client.Watch(request)
        self.q: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        try:
            for resp in self.call:
                self.q.put(resp)
        except grpc.RpcError as exc:
            self.q.put(exc)

    async def take(self, n: int = 1, timeout: float = 10.0, skip_checkpoints: bool = True) -> list:
        out = []
        while len(out) < n:
            item = await asyncio.to_thread(self.q.get, True, timeout)
            if isinstance(item, grpc.RpcError):
                raise item
            if skip_checkpoints and item.is_checkpoint:
                continue
            out.append(item)
        return out

    async def error(self, timeout: float = 10.0) -> grpc.RpcError:
        while True:
            item = await asyncio.to_thread(self.q.get, True, timeout)
            if isinstance(item, grpc.RpcError):
                return item

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(5)


BASE_SCHEMA = "definition user {}\n\ndefinition group {\n\trelation member: user\n}"


def doc_definition(name: str) -> str:
    """A definition the tests' relationships fit: owner / viewer / editor of users and
    group members (viewer also ``user:*``), and a permission to refuse writes to."""
    return (
        f"definition {name} {{\n\trelation owner: user | group#member\n"
        f"\trelation viewer: user | group#member | user:*\n\trelation editor: user\n"
        f"\tpermission view = viewer + owner\n}}"
    )


def _define(client, names: tuple[str, ...]):
    try:
        current = client.ReadSchema(ReadSchemaRequest()).schema_text
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        current = BASE_SCHEMA
    text = "\n\n".join([current, *(doc_definition(n) for n in names)])
    return client.WriteSchema(WriteSchemaRequest(schema=text))


async def define(client, *names: str):
    """Add a test definition per name to the surface's SpiceDB schema (the tenant is shared
    by the session, so a test extends the schema rather than replacing it)."""
    return await asyncio.to_thread(_define, client, names)


async def defined_type(client, prefix: str = "doc") -> str:
    """A fresh object type no other test uses, defined in the schema."""
    name = unique_type(prefix)
    await define(client, name)
    return name


def no_key_client(target: str) -> SimpleNamespace:
    """The ``authzed`` stubs on a plaintext channel that sends no ``authorization``."""
    channel = grpc.insecure_channel(target)
    return SimpleNamespace(
        WriteRelationships=PermissionsServiceStub(channel).WriteRelationships,
        Watch=WatchServiceStub(channel).Watch,
    )
