"""Unit tests for request validation: every rule names the field, and a bad batch is refused
as a whole before anything could be written."""

from __future__ import annotations

import orjson
import pytest

from watch_service.protocol.errors import ApiError
from watch_service.protocol.requests import (
    DEFAULT_READ_LIMIT,
    INT63,
    MAX_BATCH,
    MAX_READ_LIMIT,
    NewRecord,
    ReadQuery,
    TopicConfig,
    check_int,
    new_records,
    parse_json,
    read_query,
    topic_config,
    type_name,
)

pytestmark = pytest.mark.unit


def raises(fn, *args, status=400, code="invalid_request") -> str:
    with pytest.raises(ApiError) as info:
        fn(*args)
    assert (info.value.status, info.value.code) == (status, code)
    return info.value.message


def body(doc) -> bytes:
    return orjson.dumps(doc)


# -- JSON and types ----------------------------------------------------------------------------
def test_parse_json():
    assert parse_json(b'{"a":[1]}') == {"a": [1]}
    msg = raises(parse_json, b'{"a":')
    assert msg.startswith("body: malformed JSON (")
    assert raises(parse_json, b"\xff\xfe").startswith("body: malformed JSON (")
    assert raises(parse_json, b"NaN").startswith("body: malformed JSON (")


@pytest.mark.parametrize(
    "value, name",
    [
        ({}, "object"),
        ([], "array"),
        ("s", "string"),
        (True, "boolean"),
        (None, "null"),
        (1, "integer"),
        (1.5, "number"),
        (b"x", "value"),
    ],
)
def test_type_name(value, name):
    assert type_name(value) == name


def test_check_int():
    assert check_int(5, "f", 1) == 5
    assert check_int(INT63, "f", 1) == INT63
    assert raises(check_int, True, "f", 0) == "f: expected an integer, got boolean"
    assert raises(check_int, 1.0, "f", 0) == "f: expected an integer, got number"
    assert raises(check_int, "1", "f", 0) == "f: expected an integer, got string"
    assert raises(check_int, 0, "f", 1) == f"f: 0 is out of range [1, {INT63}]"
    assert raises(check_int, INT63 + 1, "f", 1) == f"f: {INT63 + 1} is out of range [1, {INT63}]"
    assert raises(check_int, 11, "f", 1, 10) == "f: 11 is out of range [1, 10]"


# -- topic config ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"", TopicConfig(None, None)),
        (b"  \n", TopicConfig(None, None)),
        (b"{}", TopicConfig(None, None)),
        (b'{"max_records": null, "ttl_ms": null}', TopicConfig(None, None)),
        (b'{"max_records": 10}', TopicConfig(10, None)),
        (b'{"ttl_ms": 60000, "max_records": 1}', TopicConfig(1, 60000)),
    ],
)
def test_topic_config_valid(raw, expected):
    assert topic_config(raw) == expected


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"[]", "body: expected a JSON object, got array"),
        (b"null", "body: expected a JSON object, got null"),
        (b'"x"', "body: expected a JSON object, got string"),
        (b'{"max_records": 0}', f"max_records: 0 is out of range [1, {INT63}]"),
        (b'{"max_records": -5}', f"max_records: -5 is out of range [1, {INT63}]"),
        (b'{"ttl_ms": "60s"}', "ttl_ms: expected an integer, got string"),
        (b'{"ttl_ms": 1.5}', "ttl_ms: expected an integer, got number"),
        (b'{"max_records": true}', "max_records: expected an integer, got boolean"),
        (
            b'{"max_records": 1, "retention": 2}',
            "body: unknown field(s) retention (allowed: max_records, ttl_ms)",
        ),
        (b'{"b": 1, "a": 2}', "body: unknown field(s) a, b (allowed: max_records, ttl_ms)"),
    ],
)
def test_topic_config_invalid(raw, message):
    assert raises(topic_config, raw) == message


def test_topic_config_malformed_json():
    assert raises(topic_config, b"{max_records: 1}").startswith("body: malformed JSON (")


# -- new records -------------------------------------------------------------------------------
def test_new_records_normalises_json_compactly():
    out = new_records(
        body(
            {
                "records": [
                    {"data": {"b": 1, "a": [1, 2]}},
                    {"data": None, "meta": {"k": "v"}, "tag": "t", "node": "n1"},
                ]
            }
        ),
        1024,
    )
    assert out == [
        NewRecord('{"b":1,"a":[1,2]}', None, None, None),
        NewRecord("null", '{"k":"v"}', "t", "n1"),
    ]
    spaced = new_records(b'{"records":[{"data": { "x" : [ 1 , 2 ] }}]}', 1024)
    assert spaced[0].data == '{"x":[1,2]}'


def test_batch_size_bounds():
    one = {"data": 1}
    assert len(new_records(body({"records": [one] * MAX_BATCH}), 100)) == MAX_BATCH
    assert (
        raises(new_records, body({"records": []}), 100) == "records: expected 1-1000 records, got 0"
    )
    assert (
        raises(new_records, body({"records": [one] * (MAX_BATCH + 1)}), 100)
        == "records: expected 1-1000 records, got 1001"
    )


@pytest.mark.parametrize(
    "doc, message",
    [
        ([], "body: expected a JSON object, got array"),
        ({}, "records: expected an array of 1-1000 records, got null"),
        ({"records": {"data": 1}}, "records: expected an array of 1-1000 records, got object"),
        (
            {"records": [{"data": 1}], "topic": "x"},
            "body: unknown field(s) topic (allowed: records)",
        ),
        ({"records": [{"data": 1}, 5]}, "records[1]: expected a JSON object, got integer"),
        ({"records": [{"meta": {}}]}, "records[0].data: required"),
        (
            {"records": [{"data": 1, "extra": 1}]},
            "records[0]: unknown field(s) extra (allowed: data, meta, node, tag)",
        ),
        ({"records": [{"data": 1, "meta": [1]}]}, "records[0].meta: expected an object, got array"),
        (
            {"records": [{"data": 1, "meta": "m"}]},
            "records[0].meta: expected an object, got string",
        ),
        (
            {"records": [{"data": 1, "tag": 5}]},
            "records[0].tag: expected a string of 1-256 characters without NUL",
        ),
        (
            {"records": [{"data": 1, "tag": ""}]},
            "records[0].tag: expected a string of 1-256 characters without NUL",
        ),
        (
            {"records": [{"data": 1, "tag": "x" * 257}]},
            "records[0].tag: expected a string of 1-256 characters without NUL",
        ),
        (
            {"records": [{"data": 1, "tag": "a\x00b"}]},
            "records[0].tag: expected a string of 1-256 characters without NUL",
        ),
        (
            {"records": [{"data": 1}, {"data": 2, "node": "a b"}]},
            "records[1].node: must be 1-128 printable characters without whitespace, got 'a b'",
        ),
        (
            {"records": [{"data": 1, "node": ""}]},
            "records[0].node: must be 1-128 printable characters without whitespace, got ''",
        ),
        (
            {"records": [{"data": 1, "node": 7}]},
            "records[0].node: must be 1-128 printable characters without whitespace, got 7",
        ),
    ],
)
def test_new_records_invalid(doc, message):
    assert raises(new_records, body(doc), 1024) == message


def test_null_meta_tag_node_mean_absent():
    out = new_records(body({"records": [{"data": 1, "meta": None, "tag": None, "node": None}]}), 64)
    assert out == [NewRecord("1", None, None, None)]


def test_per_record_limit_counts_data_plus_meta():
    data = "x" * 90  # '"xxx…"' is 92 bytes
    assert new_records(body({"records": [{"data": data}]}), 92)[0].data == f'"{data}"'
    records = [{"data": 1}, {"data": 2}, {"data": data, "meta": {"a": 1}}, {"data": 3}]
    message = raises(
        new_records, body({"records": records}), 92, status=413, code="payload_too_large"
    )
    assert message == "records[2]: 99 bytes of data+meta is over the per-record limit of 92 bytes"


# -- read query --------------------------------------------------------------------------------
def test_read_query_defaults_and_bounds():
    assert read_query({}) == ReadQuery(0, DEFAULT_READ_LIMIT)
    assert read_query({"from_seq": "17", "limit": "1"}) == ReadQuery(17, 1)
    assert read_query({"limit": str(MAX_READ_LIMIT)}) == ReadQuery(0, MAX_READ_LIMIT)
    assert read_query({"token": "secret"}) == ReadQuery(0, DEFAULT_READ_LIMIT)


@pytest.mark.parametrize(
    "query, message",
    [
        ({"from_seq": "-1"}, f"from_seq: -1 is out of range [0, {INT63}]"),
        ({"from_seq": str(INT63 + 1)}, f"from_seq: {INT63 + 1} is out of range [0, {INT63}]"),
        ({"limit": "0"}, "limit: 0 is out of range [1, 10000]"),
        ({"limit": "10001"}, "limit: 10001 is out of range [1, 10000]"),
        ({"from_seq": "abc"}, "from_seq: expected an integer, got 'abc'"),
        ({"from_seq": ""}, "from_seq: expected an integer, got ''"),
        ({"from_seq": "1.5"}, "from_seq: expected an integer, got '1.5'"),
        ({"limit": "1e3"}, "limit: expected an integer, got '1e3'"),
        ({"limit": "1_000"}, "limit: expected an integer, got '1_000'"),
        ({"limit": " 10"}, "limit: expected an integer, got ' 10'"),
        ({"from_seq": "٣"}, "from_seq: expected an integer, got '٣'"),
        ({"from": "1"}, "query: unknown parameter(s) from (allowed: from_seq, limit)"),
        (
            {"limit": "1", "zz": "1", "aa": "2"},
            "query: unknown parameter(s) aa, zz (allowed: from_seq, limit)",
        ),
    ],
)
def test_read_query_invalid(query, message):
    assert raises(read_query, query) == message
