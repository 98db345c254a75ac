"""Bad input on every route of the Topics and Records APIs: a 4xx with the contract's body,
never a 500, and nothing written (head_seq unchanged, no topic created)."""

from __future__ import annotations

import orjson
import pytest
from yarl import URL

from tests.support import unique

pytestmark = [pytest.mark.service, pytest.mark.pg]

TOPIC_RULE = (
    "is not a valid topic name (1-200 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit)"
)
INT63 = 2**63 - 1


def json_error(raw: bytes) -> str:
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return f"body: malformed JSON ({exc})"
    raise AssertionError(f"{raw!r} is valid JSON")


async def state(db, name: str):
    cur = await db.execute(
        "SELECT head_seq, earliest_seq, max_records, ttl_ms, "
        "(SELECT count(*) FROM records WHERE topic = %(n)s) FROM topics WHERE name = %(n)s",
        {"n": name},
    )
    return await cur.fetchone()


async def expect_refused(http, method: str, url: str, status: int, message: str, **kw) -> None:
    kw.setdefault("headers", {"Content-Type": "application/json"})  # JSON routes need it (415)
    async with http.request(method, url, **kw) as r:
        assert r.content_type == "application/json"
        body = await r.json()
    code = {400: "invalid_request", 413: "payload_too_large"}[status]
    assert (r.status, body) == (status, {"error": {"code": code, "message": message}})


@pytest.fixture
async def topic(service, http, db) -> str:
    """A topic with retention set and two records: refused requests must leave all of it as is."""
    name = unique()
    async with http.put(
        f"{service.url}/v0/topics/{name}", json={"max_records": 100, "ttl_ms": 3_600_000}
    ) as r:
        assert r.status == 201
    async with http.post(
        f"{service.url}/v0/topics/{name}/records", json={"records": [{"data": 1}, {"data": 2}]}
    ) as r:
        assert r.status == 200
    assert await state(db, name) == (2, 1, 100, 3_600_000, 2)
    return name


RECORDS_CASES = [
    pytest.param(b'{"records": [{"data": 1}', None, id="malformed-json"),
    pytest.param(b"", None, id="empty-body"),
    pytest.param(b"\xff\xfe{}", None, id="not-utf8"),
    pytest.param(b'{"records": [{"data": NaN}]}', None, id="nan"),
    pytest.param(b"[]", "body: expected a JSON object, got array", id="not-an-object"),
    pytest.param(
        b'{"records": "x"}',
        "records: expected an array of 1-1000 records, got string",
        id="records-wrong-type",
    ),
    pytest.param(
        b'{"record": []}',
        "body: unknown field(s) record (allowed: records)",
        id="unknown-top-field",
    ),
    pytest.param(
        b'{"records": [{"data": 1, "seq": 5}]}',
        "records[0]: unknown field(s) seq (allowed: data, meta, node, tag)",
        id="unknown-record-field",
    ),
    pytest.param(b'{"records": []}', "records: expected 1-1000 records, got 0", id="zero-records"),
    pytest.param(
        orjson.dumps({"records": [{"data": 1}] * 1001}),
        "records: expected 1-1000 records, got 1001",
        id="1001-records",
    ),
    pytest.param(
        b'{"records": [{"data": 1}, "x"]}',
        "records[1]: expected a JSON object, got string",
        id="record-not-object",
    ),
    pytest.param(b'{"records": [{"tag": "t"}]}', "records[0].data: required", id="no-data"),
    pytest.param(
        b'{"records": [{"data": 1, "meta": [1, 2]}]}',
        "records[0].meta: expected an object, got array",
        id="meta-array",
    ),
    pytest.param(
        b'{"records": [{"data": 1, "meta": "m"}]}',
        "records[0].meta: expected an object, got string",
        id="meta-string",
    ),
    pytest.param(
        b'{"records": [{"data": 1}, {"data": 2, "node": "node 1"}]}',
        "records[1].node: must be 1-128 printable characters without whitespace, got 'node 1'",
        id="node-whitespace",
    ),
    pytest.param(
        orjson.dumps({"records": [{"data": 1, "node": "n" * 129}]}),
        "records[0].node: must be 1-128 printable characters without whitespace, "
        f"got {'n' * 129!r}",
        id="node-129",
    ),
    pytest.param(
        b'{"records": [{"data": 1, "node": 5}]}',
        "records[0].node: must be 1-128 printable characters without whitespace, got 5",
        id="node-int",
    ),
    pytest.param(
        b'{"records": [{"data": 1, "tag": 1}]}',
        "records[0].tag: expected a string of 1-256 characters without NUL",
        id="tag-int",
    ),
    pytest.param(
        b'{"records": [{"data": 1, "tag": "a\\u0000"}]}',
        "records[0].tag: expected a string of 1-256 characters without NUL",
        id="tag-nul",
    ),
]


@pytest.mark.parametrize("raw, message", RECORDS_CASES)
async def test_bad_append_writes_nothing(service, http, db, topic, raw, message):
    await expect_refused(
        http,
        "POST",
        f"{service.url}/v0/topics/{topic}/records",
        400,
        message or json_error(raw),
        data=raw,
        headers={"Content-Type": "application/json"},
    )
    assert await state(db, topic) == (2, 1, 100, 3_600_000, 2)


@pytest.mark.parametrize(
    "query, message",
    [
        ("from_seq=-1", f"from_seq: -1 is out of range [0, {INT63}]"),
        ("from_seq=abc", "from_seq: expected an integer, got 'abc'"),
        ("from_seq=1.0", "from_seq: expected an integer, got '1.0'"),
        (f"from_seq={INT63 + 1}", f"from_seq: {INT63 + 1} is out of range [0, {INT63}]"),
        ("limit=0", "limit: 0 is out of range [1, 10000]"),
        ("limit=10001", "limit: 10001 is out of range [1, 10000]"),
        ("limit=ten", "limit: expected an integer, got 'ten'"),
        ("limit=", "limit: expected an integer, got ''"),
        ("limit=1_0", "limit: expected an integer, got '1_0'"),
        ("cursor=5", "query: unknown parameter(s) cursor (allowed: from_seq, limit)"),
    ],
)
async def test_bad_read_query(service, http, db, topic, query, message):
    await expect_refused(
        http, "GET", f"{service.url}/v0/topics/{topic}/records?{query}", 400, message
    )
    assert await state(db, topic) == (2, 1, 100, 3_600_000, 2)


CONFIG_CASES = [
    pytest.param(b'{"max_records": 0}', f"max_records: 0 is out of range [1, {INT63}]", id="cap-0"),
    pytest.param(b'{"ttl_ms": -1}', f"ttl_ms: -1 is out of range [1, {INT63}]", id="ttl-negative"),
    pytest.param(
        b'{"max_records": "5"}', "max_records: expected an integer, got string", id="cap-string"
    ),
    pytest.param(b'{"ttl_ms": 1.5}', "ttl_ms: expected an integer, got number", id="ttl-float"),
    pytest.param(
        b'{"max_records": false}', "max_records: expected an integer, got boolean", id="cap-bool"
    ),
    pytest.param(
        b'{"max_records": 1, "retain": "forever"}',
        "body: unknown field(s) retain (allowed: max_records, ttl_ms)",
        id="unknown-field",
    ),
    pytest.param(b"[1]", "body: expected a JSON object, got array", id="not-an-object"),
    pytest.param(b'{"max_records": }', None, id="malformed-json"),
]


@pytest.mark.parametrize("raw, message", CONFIG_CASES)
async def test_bad_topic_config_creates_nothing(service, http, db, raw, message):
    name = unique()
    await expect_refused(
        http, "PUT", f"{service.url}/v0/topics/{name}", 400, message or json_error(raw), data=raw
    )
    assert await state(db, name) is None


@pytest.mark.parametrize("raw, message", CONFIG_CASES)
async def test_bad_topic_config_changes_nothing(service, http, db, topic, raw, message):
    await expect_refused(
        http, "PUT", f"{service.url}/v0/topics/{topic}", 400, message or json_error(raw), data=raw
    )
    assert await state(db, topic) == (2, 1, 100, 3_600_000, 2)


@pytest.mark.parametrize(
    "name",
    [
        "has space",
        "a" * 201,
        "-leading-dash",
        "café",
        "_under",
        "tab\tname",
        "日本",
        "a#b",
    ],
)
async def test_bad_topic_names_create_nothing(service, http, db, name):
    message = f"topic: {name!r} {TOPIC_RULE}"
    base = f"{service.url}/v0/topics/"
    url = URL(base) / name
    await expect_refused(http, "PUT", url, 400, message, json={})
    await expect_refused(
        http, "POST", url / "records", 400, message, json={"records": [{"data": 1}]}
    )
    await expect_refused(http, "GET", url, 400, message)
    await expect_refused(http, "GET", url / "records", 400, message)
    await expect_refused(http, "DELETE", url, 400, message)
    assert await state(db, name) is None


async def test_longest_valid_name_is_accepted(service, http, db):
    name = unique() + "x" * (200 - len(unique()))
    assert len(name) == 200
    async with http.put(f"{service.url}/v0/topics/{name}", json={}) as r:
        assert r.status == 201


async def test_body_over_the_limit_writes_nothing(make_service, http, db, topic):
    svc = await make_service(max_body_bytes=1024)
    body = orjson.dumps({"records": [{"data": "x" * 1100}]})
    await expect_refused(
        http,
        "POST",
        f"{svc.url}/v0/topics/{topic}/records",
        413,
        f"body of {len(body)} bytes is over the limit of 1024 bytes",
        data=body,
    )

    async def chunked():  # no Content-Length: the limit is enforced while reading
        for i in range(0, len(body), 256):
            yield body[i : i + 256]

    await expect_refused(
        http,
        "POST",
        f"{svc.url}/v0/topics/{topic}/records",
        413,
        "body is over the limit of 1024 bytes",
        data=chunked(),
    )
    await expect_refused(
        http,
        "PUT",
        f"{svc.url}/v0/topics/{topic}",
        413,
        "body of 2000 bytes is over the limit of 1024 bytes",
        data=b" " * 1991 + b'{"x": 1} ',
    )
    assert await state(db, topic) == (2, 1, 100, 3_600_000, 2)
