"""Building SpiceDB requests and reading Watch streams with the official ``authzed`` client."""

from __future__ import annotations

import asyncio
import queue
import threading

import grpc
from authzed.api.v1 import (
    InsecureClient,
    ObjectReference,
    Relationship,
    RelationshipUpdate,
    SubjectReference,
    WatchRequest,
    WriteRelationshipsRequest,
)
from google.protobuf.struct_pb2 import Struct

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
