"""One keys file, every surface: the HTTP topic and watch routes, Permify REST, Permify gRPC
(stubs of our ``base.v1`` proto) and the SpiceDB gRPC surface (the official ``authzed`` client)
accept exactly the keys whose scope and prefixes cover what they touch, and refuse the rest the
same way (401 / UNAUTHENTICATED for no or an unknown key, 403 / PERMISSION_DENIED for a key
without the scope or the prefix; SpiceDB, like the real server, answers an unknown key with
PERMISSION_DENIED). The expected outcome of each case is computed from the keys file by
``Key.can``, not written out.
"""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest
from authzed.api.v1 import (
    InsecureClient,
    ReadRelationshipsRequest,
    RelationshipFilter,
    WriteRelationshipsRequest,
)

from tests.authz.clients import permify_grpc_client
from tests.authz.spicedb_support import Op, define, update
from tests.support import free_port, unique
from watch_service.compat.proto import permify_base_v1_pb2 as pb
from watch_service.protocol import authz as pa
from watch_service.settings import Settings
from watch_service.web.auth import KeyRing, hash_secret

pytestmark = [pytest.mark.service, pytest.mark.pg]

RUN = unique("mx")
A, B = f"{RUN}-a", f"{RUN}-b"  # topic / tenant names of two teams
SPICE = pa.change_topic(Settings().spicedb_tenant)
# id -> (scopes, prefixes); the secret of each is "s-" + id.
KEYS = {
    "admin": (["read", "write", "admin"], [""]),
    "rw-a": (["read", "write"], [A, pa.change_topic(A), SPICE]),
    "r-a": (["read"], [A, pa.change_topic(A), SPICE]),
    "rw-b": (["read", "write"], [B, pa.change_topic(B)]),
}
GRPC_DOC = "mx_" + RUN.replace("-", "_")
SCHEMA = "entity user {}\n\nentity doc {\n    relation viewer @user\n}\n"


def keys_toml() -> str:
    out = []
    for key_id, (scopes, prefixes) in KEYS.items():
        out.append(
            f'[[keys]]\nid = "{key_id}"\nsecret_sha256 = "{hash_secret("s-" + key_id)}"\n'
            f"scopes = {scopes!r}\nprefixes = {prefixes!r}\n".replace("'", '"')
        )
    return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class Case:
    surface: str
    what: str
    scope: str
    topic: str


@pytest.fixture(scope="module")
async def keyed(pg_url, base_settings, tmp_path_factory, http):
    from tests.support import InProcessService

    path = tmp_path_factory.mktemp("matrix") / "keys.toml"
    path.write_text(keys_toml())
    settings = dataclasses.replace(
        base_settings, keys_file=path, grpc_port=free_port(), permify_grpc_port=free_port()
    )
    svc = await InProcessService(settings, pg_url).start()
    svc.ring = KeyRing.load(path)
    svc.grpc_target = f"127.0.0.1:{settings.grpc_port}"
    svc.permify_port = settings.permify_grpc_port
    admin = {"Authorization": "Bearer s-admin"}
    for team in (A, B):  # what the cases touch exists, so only auth decides the outcome
        async with http.put(f"{svc.url}/v0/topics/{team}", json={}, headers=admin) as r:
            assert r.status == 201
        async with http.post(
            f"{svc.url}/v1/tenants/create", json={"id": team, "name": team}, headers=admin
        ) as r:
            assert r.status == 200, await r.text()
        async with http.post(
            f"{svc.url}/v1/tenants/{team}/schemas/write", json={"schema": SCHEMA}, headers=admin
        ) as r:
            assert r.status == 200, await r.text()
    # the SpiceDB surface validates writes: the cases' object type is in its schema
    await define(InsecureClient(svc.grpc_target, "s-admin"), GRPC_DOC)
    yield svc
    await svc.stop()


def http_cases() -> list[tuple[Case, str, str, dict | None]]:
    """(case, method, path, json body) for each HTTP and Permify REST call."""
    out: list[tuple[Case, str, str, dict | None]] = []
    for team in (A, B):
        topic, change = team, pa.change_topic(team)
        rel = {
            "entity": {"type": "doc", "id": "d1"},
            "relation": "viewer",
            "subject": {"type": "user", "id": "u1"},
        }
        out += [
            (
                Case("http", f"append {team}", "write", topic),
                "POST",
                f"/v0/topics/{topic}/records",
                {"records": [{"data": 1}]},
            ),
            (
                Case("http", f"read {team}", "read", topic),
                "GET",
                f"/v0/topics/{topic}/records",
                None,
            ),
            (Case("http", f"topic {team}", "read", topic), "GET", f"/v0/topics/{topic}", None),
            (
                Case("http", f"watch {team}", "read", topic),
                "POST",
                "/v0/watch",
                {"topics": {topic: {"from_seq": 0}}},
            ),
            (Case("http", f"config {team}", "admin", topic), "PUT", f"/v0/topics/{topic}", {}),
            (
                Case("permify", f"write {team}", "write", change),
                "POST",
                f"/v1/tenants/{team}/relationships/write",
                {"metadata": {"schema_version": ""}, "tuples": [rel]},
            ),
            (
                Case("permify", f"read {team}", "read", change),
                "POST",
                f"/v1/tenants/{team}/data/relationships/read",
                {"metadata": {"snap_token": ""}, "filter": {"entity": {"type": "doc"}}},
            ),
            (
                Case("permify", f"schema {team}", "read", change),
                "POST",
                f"/v1/tenants/{team}/schemas/read",
                {"metadata": {"schema_version": ""}},
            ),
        ]
    return out


CREDENTIALS = [None, "s-nobody", *(f"s-{k}" for k in KEYS)]


def expected(ring: KeyRing, secret: str | None, case: Case) -> int:
    """200, 401 or 403 by the keys file alone."""
    key = ring.by_hash.get(hash_secret(secret)) if secret else None
    if key is None:
        return 401
    return 200 if key.can(case.scope, case.topic) else 403


async def test_http_and_permify_rest(keyed, http):
    seen = 0
    for case, method, path, body in http_cases():
        for secret in CREDENTIALS:
            headers = {"Authorization": f"Bearer {secret}"} if secret else {}
            async with http.request(method, keyed.url + path, json=body, headers=headers) as r:
                doc = await r.json()
                status = r.status
            want = expected(keyed.ring, secret, case)
            got = 200 if status in (200, 201) else status
            assert got == want, (case, secret, status, doc)
            if want != 200 and case.surface == "http":
                assert set(doc) == {"error"} and doc["error"]["code"] in (
                    "unauthorized",
                    "forbidden",
                )
            elif want != 200:  # grpc-gateway body: UNAUTHENTICATED 16, PERMISSION_DENIED 7
                assert doc["code"] == {401: 16, 403: 7}[want], doc
            seen += 1
    assert seen == len(http_cases()) * len(CREDENTIALS)


def _grpc(target: str, secret: str | None, case: Case) -> grpc.StatusCode:
    client = InsecureClient(target, secret or "")
    doc = GRPC_DOC
    try:
        if case.scope == "write":
            client.WriteRelationships(
                WriteRelationshipsRequest(
                    updates=[update(Op.OPERATION_TOUCH, f"{doc}:1", "viewer", "user:1")]
                )
            )
        else:
            list(
                client.ReadRelationships(
                    ReadRelationshipsRequest(
                        relationship_filter=RelationshipFilter(resource_type=doc)
                    )
                )
            )
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def test_spicedb_grpc_uses_the_same_keys(keyed):
    """No key, an unknown key, and each key of the file; no AUDITSYNC_GRPC_KEY is set."""
    codes = {
        200: grpc.StatusCode.OK,
        # as SpiceDB answers: no key UNAUTHENTICATED, an unknown key PERMISSION_DENIED
        401: grpc.StatusCode.UNAUTHENTICATED,
        403: grpc.StatusCode.PERMISSION_DENIED,
    }
    for scope in ("write", "read"):
        case = Case("spicedb", scope, scope, SPICE)
        for secret in CREDENTIALS:
            got = await asyncio.to_thread(_grpc, keyed.grpc_target, secret, case)
            want = expected(keyed.ring, secret, case)
            if want == 401 and secret is not None:
                want = 403
            assert got == codes[want], (case, secret, got)


async def test_legacy_grpc_key_is_one_more_key_of_the_ring(make_service, http, tmp_path):
    """AUDITSYNC_GRPC_KEY (deprecated) is a full-scope key on every surface, next to the
    file's keys; with it alone nothing is open any more."""
    port = free_port()
    path = tmp_path / "keys.toml"
    path.write_text(keys_toml())
    svc = await make_service(keys_file=path, grpc_port=port, grpc_key="legacy")
    target = f"127.0.0.1:{port}"
    read = Case("spicedb", "read", "read", SPICE)
    assert await asyncio.to_thread(_grpc, target, "s-r-a", read) == grpc.StatusCode.OK
    assert await asyncio.to_thread(_grpc, target, "legacy", read) == grpc.StatusCode.OK
    async with http.get(
        f"{svc.url}/v0/topics/{A}", headers={"Authorization": "Bearer legacy"}
    ) as r:
        assert r.status in (200, 404)
    alone = await make_service(grpc_key="legacy")
    async with http.get(f"{alone.url}/v0/topics") as r:
        assert r.status == 401


async def test_permify_grpc_uses_the_same_keys(keyed):
    """Data.Write (write scope) and Data.ReadRelationships (read scope) on each team's tenant,
    with no key, an unknown key and each key of the file."""
    codes = {
        200: grpc.StatusCode.OK,
        401: grpc.StatusCode.UNAUTHENTICATED,
        403: grpc.StatusCode.PERMISSION_DENIED,
    }
    seen = 0
    tuple_ = pb.Tuple(
        entity=pb.Entity(type="doc", id="d1"),
        relation="viewer",
        subject=pb.Subject(type="user", id="u1"),
    )
    for team in (A, B):
        calls = {
            "write": lambda c, t=team: c.data.Write(
                pb.DataWriteRequest(
                    tenant_id=t, metadata=pb.DataWriteRequestMetadata(), tuples=[tuple_]
                ),
                metadata=c.md,
            ),
            "read": lambda c, t=team: c.data.ReadRelationships(
                pb.RelationshipReadRequest(
                    tenant_id=t,
                    metadata=pb.RelationshipReadRequestMetadata(),
                    filter=pb.TupleFilter(entity=pb.EntityFilter(type="doc")),
                ),
                metadata=c.md,
            ),
        }
        for scope, call in calls.items():
            case = Case("permify-grpc", f"{scope} {team}", scope, pa.change_topic(team))
            for secret in CREDENTIALS:
                client = permify_grpc_client(keyed.permify_port, secret)
                try:
                    await call(client)
                    got = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as err:
                    got = err.code()
                finally:
                    await client.channel.close()
                want = codes[expected(keyed.ring, secret, case)]
                assert got == want, (case, secret, got)
                seen += 1
    assert seen == 2 * 2 * len(CREDENTIALS)
