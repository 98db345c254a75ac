"""Helpers around the official clients, which are synchronous: the tests call them through
``asyncio.to_thread`` so the in-process service's event loop keeps running.

The ``permify`` 1.7 client cannot consume the streaming watch (``watch_watch`` reads the whole
body and parses it as one JSON document), so ``PermifyWatch`` uses its
``watch_watch_without_preload_content`` (the client's own request) and parses each line with
the client's ``StreamResultOfWatchResponse`` model.
"""

from __future__ import annotations

import asyncio
import types
import uuid

import grpc
import orjson
import permify
from permify.models.stream_result_of_watch_response import StreamResultOfWatchResponse

from watch_service.compat.proto import permify_base_v1_pb2_grpc as pb_grpc
from watch_service.protocol import authz as pa

GRPC_KEY = "test-grpc-key"


def unique_type(prefix: str = "doc") -> str:
    """A SpiceDB/Permify object type no other test uses: letters and ``_`` only, a name both
    dialects accept (Permify's types have no digits)."""
    return f"{prefix}_{uuid.uuid4().hex[:10].translate(str.maketrans('0123456789', 'ghijklmnop'))}"


def permify_schema_for(doc: str) -> str:
    """A Permify schema with ``user`` and ``doc`` (owner, viewer: users) for writes to t1."""
    return f"entity user {{}}\nentity {doc} {{\n relation owner @user\n relation viewer @user\n}}"


def seq_of(tenant: str, token: str) -> int:
    return pa.decode_token(pa.change_topic(tenant), token)


def ptuple(entity: str, relation: str, subject: str) -> permify.Tuple:
    et, eid = entity.split(":", 1)
    st, sid = subject.split(":", 1)
    srel = ""
    if "#" in sid:
        sid, srel = sid.split("#", 1)
    return permify.Tuple(
        entity=permify.Entity(type=et, id=eid),
        relation=relation,
        subject=permify.Subject(type=st, id=sid, relation=srel or None),
    )


def bool_value(flag: bool) -> permify.Any:
    return permify.Any.from_dict(
        {"@type": "type.googleapis.com/base.v1.BooleanValue", "data": flag}
    )


class PermifyWatch:
    """One open ``POST /v1/tenants/{t}/watch`` stream, read line by line in a thread."""

    def __init__(
        self,
        api: permify.ApiClient,
        tenant: str,
        snap_token: str | None = None,
        read_timeout: float = 15.0,
    ) -> None:
        self.api, self.tenant, self.snap_token = api, tenant, snap_token
        self.read_timeout = read_timeout
        self.resp = None
        self._buf = b""
        self._chunks = None

    async def open(self) -> PermifyWatch:
        """Returns once the response headers arrived: the start position is then fixed."""
        self.resp = await asyncio.to_thread(
            permify.WatchApi(self.api).watch_watch_without_preload_content,
            self.tenant,
            permify.WatchBody(snap_token=self.snap_token),
            _request_timeout=(5.0, self.read_timeout),
        )
        return self

    def _next_line(self) -> bytes:
        if self._chunks is None:
            self._chunks = self.resp.read_chunked(decode_content=False)
        while b"\n" not in self._buf:
            self._buf += next(self._chunks)
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    async def lines(self, n: int) -> list[StreamResultOfWatchResponse]:
        raw = await asyncio.to_thread(lambda: [self._next_line() for _ in range(n)])
        return [StreamResultOfWatchResponse.from_json(line.decode()) for line in raw]

    def close(self) -> None:
        if self.resp is not None:  # close, never release: the stream must not be reused
            self.resp.close()


async def sse_records(
    http, base_url: str, topic: str, from_seq: int, n: int, timeout: float = 15.0
) -> list[dict]:
    """The first ``n`` records after ``from_seq`` of ``topic`` through the SSE watch."""
    async with http.post(
        f"{base_url}/v0/watch", json={"topics": {topic: {"from_seq": from_seq}}}
    ) as r:
        assert r.status == 200, await r.text()
        wid = (await r.json())["wid"]
    records: list[dict] = []

    async def read() -> None:
        async with http.get(
            f"{base_url}/v0/watch/{wid}", headers={"Accept": "text/event-stream"}
        ) as resp:
            event = None
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "record":
                    records.extend(orjson.loads(line[6:])["records"])
                    if len(records) >= n:
                        return

    await asyncio.wait_for(read(), timeout)
    return records[:n]


def permify_grpc_client(
    port: int, key: str | None = None, root_cert: bytes | None = None
) -> types.SimpleNamespace:
    """Stubs of the Permify gRPC services on one channel, with ``md`` the auth metadata;
    over TLS when ``root_cert`` (the server's certificate) is given."""
    if root_cert is None:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    else:
        creds = grpc.ssl_channel_credentials(root_certificates=root_cert)
        channel = grpc.aio.secure_channel(f"localhost:{port}", creds)
    return types.SimpleNamespace(
        channel=channel,
        tenancy=pb_grpc.TenancyStub(channel),
        schema=pb_grpc.SchemaStub(channel),
        data=pb_grpc.DataStub(channel),
        watch=pb_grpc.WatchStub(channel),
        md=(("authorization", f"Bearer {key}"),) if key else None,
    )
