"""Bearer keys from the keys file: 401 / 403 with the contract body, prefix allowlists, the
filtered topic list, dev mode, ``?token=`` refused off the SSE routes, and a malformed keys
file failing at start with AUDITSYNC_KEYS_FILE in the message."""

from __future__ import annotations

import pytest

from tests.support import free_port, run_cli, unique
from watch_service.web.auth import KeyFileError, KeyRing, hash_secret


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def key_entry(key_id: str, secret: str, scopes: list[str], prefixes: list[str] | None) -> str:
    lines = [
        "[[keys]]",
        f'id = "{key_id}"',
        f'secret_sha256 = "{hash_secret(secret)}"',
        f"scopes = {scopes!r}".replace("'", '"'),
    ]
    if prefixes is not None:
        lines.append(f"prefixes = {prefixes!r}".replace("'", '"'))
    return "\n".join(lines) + "\n"


class Keyed:
    """A service with keys; every topic name of one test starts with ``self.p``."""

    def __init__(self, svc, http, prefix: str) -> None:
        self.svc, self.http, self.p = svc, http, prefix

    async def call(self, method: str, path: str, secret: str | None = None, **kw):
        headers = kw.pop("headers", {})
        if secret is not None:
            headers["Authorization"] = f"Bearer {secret}"
        async with self.http.request(method, self.svc.url + path, headers=headers, **kw) as r:
            return r.status, await r.json()


@pytest.fixture
async def keyed(make_service, http, tmp_path) -> Keyed:
    p = unique("auth") + "-"
    keys = tmp_path / "keys.toml"
    keys.write_text(
        "# test keys\n"
        + key_entry(
            "root", "root-secret", ["admin", "read", "write"], None
        )  # prefixes default [""]
        + key_entry("writer", "w-secret", ["write"], [p + "app-"])
        + key_entry("reader", "r-secret", ["read"], [p + "app-", p + "shared-"])
        + key_entry("nobody", "n-secret", [], [""])
    )
    return Keyed(await make_service(keys_file=keys), http, p)


@pytest.mark.service
@pytest.mark.pg
async def test_no_key_unknown_key_bad_scheme_are_401(keyed):
    t = f"/v0/topics/{keyed.p}app-1"
    missing = (401, error("unauthorized", "missing bearer key (Authorization: Bearer <key>)"))
    unknown = (401, error("unauthorized", "unknown bearer key"))
    scheme = (401, error("unauthorized", "Authorization: expected 'Bearer <key>'"))
    for method, path in (
        ("GET", "/v0/topics"),
        ("PUT", t),
        ("GET", t),
        ("DELETE", t),
        ("POST", t + "/records"),
        ("GET", t + "/records"),
    ):
        assert await keyed.call(method, path) == missing
        assert await keyed.call(method, path, "not-a-key") == unknown
        assert await keyed.call(method, path, headers={"Authorization": "Basic cm9vdDp4"}) == scheme
        assert await keyed.call(method, path, headers={"Authorization": "Bearer "}) == scheme
    # the secret's hash is what is stored; presenting the hash itself is not the key
    assert await keyed.call("GET", "/v0/topics", hash_secret("root-secret")) == unknown
    async with keyed.http.get(keyed.svc.url + "/v0/topics") as r:
        assert r.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.service
@pytest.mark.pg
async def test_scopes(keyed):
    t = f"/v0/topics/{keyed.p}app-1"
    assert (await keyed.call("PUT", t, "root-secret", json={}))[0] == 201
    for secret, key_id in (("w-secret", "writer"), ("r-secret", "reader"), ("n-secret", "nobody")):
        assert await keyed.call("PUT", t, secret, json={}) == (
            403,
            error("forbidden", f"key {key_id!r} lacks the 'admin' scope"),
        )
        assert await keyed.call("DELETE", t, secret) == (
            403,
            error("forbidden", f"key {key_id!r} lacks the 'admin' scope"),
        )
    assert await keyed.call(
        "POST", t + "/records", "r-secret", json={"records": [{"data": 1}]}
    ) == (403, error("forbidden", "key 'reader' lacks the 'write' scope"))
    assert await keyed.call("GET", t + "/records", "w-secret") == (
        403,
        error("forbidden", "key 'writer' lacks the 'read' scope"),
    )
    assert await keyed.call("GET", t, "n-secret") == (
        403,
        error("forbidden", "key 'nobody' lacks the 'read' scope"),
    )

    status, appended = await keyed.call(
        "POST", t + "/records", "w-secret", json={"records": [{"data": "hello"}]}
    )
    assert (status, appended["first_seq"]) == (200, 1)
    status, read = await keyed.call("GET", t + "/records", "r-secret")
    assert (status, [r["data"] for r in read["records"]]) == (200, ["hello"])
    status, topic = await keyed.call("GET", t, "r-secret")
    assert (status, topic["head_seq"]) == (200, 1)


@pytest.mark.service
@pytest.mark.pg
async def test_prefix_allowlist(keyed):
    outside = f"{keyed.p}other-1"
    t = f"/v0/topics/{outside}"
    assert (await keyed.call("PUT", t, "root-secret", json={}))[0] == 201
    assert await keyed.call(
        "POST", t + "/records", "w-secret", json={"records": [{"data": 1}]}
    ) == (403, error("forbidden", f"topic {outside!r} is outside the prefixes of key 'writer'"))
    assert await keyed.call("GET", t + "/records", "r-secret") == (
        403,
        error("forbidden", f"topic {outside!r} is outside the prefixes of key 'reader'"),
    )
    assert await keyed.call("GET", t, "r-secret") == (
        403,
        error("forbidden", f"topic {outside!r} is outside the prefixes of key 'reader'"),
    )
    # prefixes are prefixes: the writer's "app-" does not cover the reader's "shared-"
    shared = f"{keyed.p}shared-x"
    await keyed.call("PUT", f"/v0/topics/{shared}", "root-secret", json={})
    assert (await keyed.call("GET", f"/v0/topics/{shared}/records", "r-secret"))[0] == 200
    assert (
        await keyed.call(
            "POST", f"/v0/topics/{shared}/records", "w-secret", json={"records": [{"data": 1}]}
        )
    )[0] == 403
    # nothing was written by the refused requests
    status, body = await keyed.call("GET", t, "root-secret")
    assert (status, body["head_seq"]) == (200, 0)


@pytest.mark.service
@pytest.mark.pg
async def test_topic_list_shows_only_readable_topics(keyed):
    names = [f"{keyed.p}app-1", f"{keyed.p}app-2", f"{keyed.p}shared-1", f"{keyed.p}zzz-1"]
    for name in names:
        assert (await keyed.call("PUT", f"/v0/topics/{name}", "root-secret", json={}))[0] == 201

    async def listed(secret: str) -> list[str]:
        status, body = await keyed.call("GET", "/v0/topics", secret)
        assert status == 200
        return [t["topic"] for t in body["topics"] if t["topic"].startswith(keyed.p)]

    assert await listed("root-secret") == names
    assert await listed("r-secret") == names[:3]
    assert await listed("w-secret") == []  # no read scope: nothing is readable
    assert await listed("n-secret") == []


@pytest.mark.service
@pytest.mark.pg
async def test_query_token_is_refused_on_these_routes(keyed):
    t = f"/v0/topics/{keyed.p}app-1"
    await keyed.call("PUT", t, "root-secret", json={})
    refused = (
        401,
        error(
            "unauthorized",
            "?token= is accepted only on SSE stream routes; send Authorization: Bearer <key>",
        ),
    )
    for method, path, kw in (
        ("GET", "/v0/topics", {}),
        ("GET", t, {}),
        ("GET", t + "/records", {}),
        ("POST", t + "/records", {"json": {"records": [{"data": 1}]}}),
        ("PUT", t, {"json": {}}),
        ("DELETE", t, {}),
    ):
        assert await keyed.call(method, f"{path}?token=root-secret", **kw) == refused
    status, body = await keyed.call("GET", t, "root-secret")
    assert (status, body["head_seq"]) == (200, 0)


@pytest.mark.service
@pytest.mark.pg
async def test_dev_mode_is_open(service, make_service, http, tmp_path, topic_name):
    empty = tmp_path / "empty.toml"
    empty.write_text("# no keys: dev mode\n")
    for svc in (service, await make_service(keys_file=empty)):
        name = f"{topic_name}-{svc.port}"
        async with http.put(f"{svc.url}/v0/topics/{name}", json={}) as r:
            assert r.status == 201
        async with http.post(
            f"{svc.url}/v0/topics/{name}/records",
            json={"records": [{"data": 1}]},
            headers={"Authorization": "Bearer anything"},
        ) as r:
            assert r.status == 200
        async with http.get(f"{svc.url}/v0/topics/{name}/records?token=whatever") as r:
            assert r.status == 200


@pytest.mark.unit
def test_secret_sha256_is_case_insensitive(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text(
        key_entry("k", "s", ["read"], None).replace(hash_secret("s"), hash_secret("s").upper())
    )
    ring = KeyRing.load(path)
    key = ring.authenticate("Bearer s")
    assert (key.id, key.scopes, key.prefixes) == ("k", frozenset({"read"}), ("",))
    assert KeyRing.load(None).enabled is False
    assert KeyRing.load(None).authenticate(None) is None


GOOD_HASH = hash_secret("x")


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, message",
    [
        ("[[keys]\nid = 1", "is not valid TOML: "),
        (
            '[[keys]]\nid = "a"\nsecret_sha256 = "abc"\nscopes = []',
            "keys[0]: secret_sha256 must be 64 hex digits",
        ),
        (
            f'[[keys]]\nid = "a"\nsecret_sha256 = "{"g" * 64}"',
            "keys[0]: secret_sha256 must be 64 hex digits",
        ),
        (
            f'[[keys]]\nid = "a"\nsecret_sha256 = "{GOOD_HASH}"\nscopes = ["read", "root"]',
            "keys[0]: scopes must be a subset of ['admin', 'read', 'write']",
        ),
        (
            f'[[keys]]\nid = "a"\nsecret_sha256 = "{GOOD_HASH}"\nscopes = "read"',
            "keys[0]: scopes must be a subset of ['admin', 'read', 'write']",
        ),
        (
            f'[[keys]]\nid = "a"\nsecret_sha256 = "{GOOD_HASH}"\nprefixes = "app-"',
            "keys[0]: prefixes must be a list of strings",
        ),
        (f'[[keys]]\nsecret_sha256 = "{GOOD_HASH}"', "keys[0]: id must be a non-empty string"),
        (
            f'[[keys]]\nid = "a"\nsecret_sha256 = "{GOOD_HASH}"\n'
            f'[[keys]]\nid = "b"\nsecret = "plain"',
            "keys[1]: unknown field(s) ['secret']",
        ),
        ("keys = [1]", "keys[0]: expected a table"),
    ],
)
def test_malformed_keys_file(tmp_path, text, message):
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(KeyFileError) as info:
        KeyRing.load(path)
    assert str(info.value).startswith(f"AUDITSYNC_KEYS_FILE: {path}")
    assert message in str(info.value)


@pytest.mark.unit
def test_missing_keys_file(tmp_path):
    path = tmp_path / "absent.toml"
    with pytest.raises(KeyFileError) as info:
        KeyRing.load(path)
    assert str(info.value) == f"AUDITSYNC_KEYS_FILE: cannot read {path}: No such file or directory"


@pytest.mark.e2e
async def test_serve_refuses_a_malformed_keys_file(tmp_path):
    """It fails while building the app, before it would connect to PostgreSQL."""
    db_url = "postgresql://postgres@127.0.0.1:1/never"
    path = tmp_path / "keys.toml"
    path.write_text('[[keys]]\nid = "a"\nsecret_sha256 = "nope"\n')
    code, _out, err = await run_cli(
        "serve",
        "--no-migrate",
        "--port",
        str(free_port()),
        env={"DATABASE_URL": db_url, "AUDITSYNC_KEYS_FILE": str(path)},
    )
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"auditsync: AUDITSYNC_KEYS_FILE: {path}: keys[0]: secret_sha256 must be 64 hex digits"
    )


@pytest.mark.unit
def test_one_check_for_the_grpc_surfaces(tmp_path):
    """``KeyRing.check``: gRPC metadata through the same keys, scopes and prefixes as HTTP."""
    from watch_service.protocol.errors import Forbidden, Unauthorized

    path = tmp_path / "keys.toml"
    path.write_text(key_entry("r", "rs", ["read"], ["authz.t1"]))
    ring = KeyRing.load(path)
    assert ring.check([("authorization", "Bearer rs")], "read", "authz.t1").id == "r"
    assert ring.check([("authorization", b"Bearer rs")], "read", None).id == "r"
    for metadata, scope, topic, err in [
        (None, "read", "authz.t1", Unauthorized),
        ([("authorization", "Bearer nope")], "read", "authz.t1", Unauthorized),
        ([("authorization", b"Bearer \xff")], "read", "authz.t1", Unauthorized),
        ([("authorization", "Bearer rs")], "write", "authz.t1", Forbidden),
        ([("authorization", "Bearer rs")], "read", "authz.t2", Forbidden),
    ]:
        with pytest.raises(err):
            ring.check(metadata, scope, topic)
    assert KeyRing.load(None).check(None, "write", "authz.t1") is None  # dev mode


@pytest.mark.unit
def test_legacy_grpc_key_joins_the_ring(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text(key_entry("r", "rs", ["read"], ["a-"]))
    ring = KeyRing.load(path, legacy_grpc_key="old")
    legacy = ring.authenticate("Bearer old")
    assert legacy.id == "grpc-key" and legacy.can("admin", "anything")
    assert ring.authenticate("Bearer rs").can("read", "a-1")
    assert KeyRing.load(None, legacy_grpc_key="old").enabled  # alone, it turns auth on


@pytest.mark.unit
def test_non_utf8_secret_is_401_not_a_crash():
    from watch_service.protocol.errors import Unauthorized

    with pytest.raises(Unauthorized):
        hash_secret("\udcff\udcfe")  # how aiohttp hands on undecodable header bytes
