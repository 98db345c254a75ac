"""An audit log keeps what was written (issue 11.8, http-api.md "Further decisions"): numbers
come back over GET records and SSE exactly as sent, an object with a duplicate key anywhere is
refused with 400 and nothing is written, and re-encoding a delivered payload the way the sink
does gives the stored text (so the reconcile hash matches)."""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest

from tests.support import call, unique
from tests.watch import wire
from watch_service.protocol.landing import COLUMN_NAMES, payload_hash
from watch_service.protocol.payloads import PayloadError, canonical, loads_exact
from watch_service.sink.client import watch
from watch_service.sink.rows import FrameContext, frame_rows

# Numbers that any float or 64-bit integer would change, and a string escape orjson re-spells.
EXACT = (
    '{"big":18446744073709551616,"huge":-123456789012345678901234567890,"e":1E2,'
    '"trail":1.10,"neg0":-0,"negf":-0.0,"tiny":1e-400,"far":1e400,"ok":[1,2.5,"x"]}'
)
SENT = EXACT.replace(',"ok"', ' ,\n "ok"').replace('"x"', '"\\u0078"')  # whitespace, escape


# -- pure ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_loads_exact_keeps_every_number_spelling():
    assert orjson.dumps(loads_exact(SENT)).decode() == EXACT
    assert orjson.dumps(loads_exact(EXACT)).decode() == EXACT  # stored text is a fixed point
    assert payload_hash(orjson.dumps(loads_exact(EXACT)).decode()) == (
        hashlib.sha256(EXACT.encode()).hexdigest()
    )


@pytest.mark.unit
def test_loads_exact_fast_path_gives_plain_values():
    value = loads_exact(b'{"a":[1,2.5,"x",null,true]}')
    assert value == {"a": [1, 2.5, "x", None, True]}


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    ['{"a":1,"a":2}', '[{"k":{"x":1,"y":2,"x":1}}]', '{"a":{"b":[{"c":1,"c":1}]}}'],
)
def test_duplicate_keys_anywhere_are_refused(text):
    with pytest.raises(PayloadError, match="more than once"):
        loads_exact(text)


@pytest.mark.unit
@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '"\\ud800"', "{", "[1,]"])
def test_not_json_is_refused(text):
    with pytest.raises(PayloadError, match="malformed JSON"):
        loads_exact(text)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("body", "stored"),
    [
        # json.dumps's default separators: the whitespace goes, nothing else changes
        (
            '{"records": [{"data": {"t": 1, "s": "a  b"}}]}',
            '{"records":[{"data":{"t":1,"s":"a  b"}}]}',
        ),
        ("[1, 2 ,\n 3]", "[1,2,3]"),
        # whitespace and something orjson spells otherwise: the exact parse decides
        ('{"a": 1.10, "b": 1E2}', '{"a":1.10,"b":1E2}'),
        ('{"x": "\\u0078", "y": -0}', '{"x":"x","y":-0}'),
        (SENT, EXACT),
    ],
)
def test_canonical_drops_whitespace_and_keeps_every_spelling(body, stored):
    assert canonical(body.encode()) == stored.encode()
    assert canonical(body.encode()) == orjson.dumps(loads_exact(body))  # the one answer


@pytest.mark.unit
@pytest.mark.parametrize("text", ['{"a": 1, "a": 1}', '[{"k": {"x": 1, "y": 2, "x": 1}}]'])
def test_canonical_refuses_a_duplicate_key_under_whitespace(text):
    with pytest.raises(PayloadError, match="more than once"):
        canonical(text.encode())


# -- over HTTP and SSE ----------------------------------------------------------------------


async def post_raw(http, url: str, topic: str, body: str) -> tuple[int, dict]:
    return await call(
        http,
        "POST",
        f"{url}/v0/topics/{topic}/records",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )


@pytest.mark.service
@pytest.mark.pg
async def test_exact_values_over_get_records_and_sse(service, http):
    topic = unique("exact")
    assert (await call(http, "PUT", f"{service.url}/v0/topics/{topic}", json={}))[0] == 201
    meta = '{"n":1.0E+3}'
    body = f'{{"records":[{{"data":{SENT},"meta":{meta}}},{{"data":12345678901234567890123}}]}}'
    status, doc = await post_raw(http, service.url, topic, body)
    assert status == 200, doc

    async with http.get(f"{service.url}/v0/topics/{topic}/records") as r:
        raw = await r.text()
    records = raw[raw.index('"records":[') : raw.index('],"from_seq"')]
    assert f'"meta":{meta},"data":{EXACT}}}' in records
    assert '"data":12345678901234567890123}' in records

    created = await wire.create(http, service.url, {"topics": {topic: {}}})
    stream = await wire.open_stream(http, service.url, created["wid"])
    try:
        ts = loads_exact(raw)["records"][0]["$ts"]
        expected = (
            f'{{"topic":"{topic}","records":['
            f'{{"$seq":1,"$ts":{ts},"meta":{meta},"data":{EXACT}}},'
            f'{{"$seq":2,"$ts":{ts},"data":12345678901234567890123}}],'
            f'"from_seq":0,"to_seq":2,"head_seq":2}}'
        )
        assert await stream.frame() == wire.frame("record", expected, {topic: 2})
    finally:
        stream.close()


@pytest.mark.service
@pytest.mark.pg
@pytest.mark.parametrize(
    "records",
    [
        '[{"data":{"a":1,"a":2}}]',
        '[{"data":1},{"data":{"x":[{"k":1,"k":1}]}}]',
        '[{"data":1,"meta":{"m":1,"m":2}}]',
        '[{"data":1,"data":2}]',
    ],
)
async def test_duplicate_keys_are_400_and_nothing_is_written(service, http, records):
    topic = unique("dup")
    assert (await call(http, "PUT", f"{service.url}/v0/topics/{topic}", json={}))[0] == 201
    status, doc = await post_raw(http, service.url, topic, f'{{"records":{records}}}')
    assert status == 400
    assert doc["error"]["code"] == "invalid_request"
    assert "more than once" in doc["error"]["message"]
    status, info = await call(http, "GET", f"{service.url}/v0/topics/{topic}")
    assert (status, info["head_seq"]) == (200, 0)


@pytest.mark.service
@pytest.mark.pg
async def test_the_sink_lands_the_stored_text_and_its_hash(service, http):
    """The sink's client re-encodes a delivered payload to the stored text, so the landing
    zone's data_sha256 is the hash reconcile computes over ``records.data``."""
    topic = unique("exact")
    assert (await call(http, "PUT", f"{service.url}/v0/topics/{topic}", json={}))[0] == 201
    status, doc = await post_raw(http, service.url, topic, f'{{"records":[{{"data":{SENT}}}]}}')
    assert status == 200, doc
    async with asyncio.timeout(10):
        async for frame in watch(service.url, [topic], http=http):
            if frame.event == "record":
                break
    ctx = FrameContext("c", None, 1, frame.id, 0)
    (row,) = frame_rows(frame.event, frame.data, ctx, {}).rows
    columns = dict(zip(COLUMN_NAMES, row, strict=True))
    assert columns["data"] == EXACT
    assert columns["data_sha256"] == hashlib.sha256(EXACT.encode()).hexdigest()
