"""Pure parsing, formatting, validation, filters, change records and tokens."""

from __future__ import annotations

import base64

import orjson
import pytest

from watch_service.compat import permify_json as pj
from watch_service.protocol import authz as pa
from watch_service.protocol import permify_schema
from watch_service.protocol.names import TOPIC_RE

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text",
    [
        "document:1#viewer@user:alice",
        "document:1#viewer@team:eng#member",
        "doc:a@b.c:d#owner@user:bob@example.com",  # Permify ids may hold ':' and '@'
        "org/doc:x|y=z#viewer@org/user:*",
    ],
)
def test_tuple_text_round_trip(text):
    assert pa.format_tuple(pa.parse_tuple(text)) == text


def test_parse_tuple_fields_and_rejects():
    assert pa.parse_tuple("d:1:2#r@u:a@b#m") == pa.Tuple("d", "1:2", "r", "u", "a@b", "m")
    for bad in ["d:1#r", "d#r@u:1", "d:1#r@u", "d:1#r@u:1#", ":1#r@u:1", "d:1#r@u:1#m#n"]:
        with pytest.raises(pa.AuthzInputError):
            pa.parse_tuple(bad)


def test_attribute_ref_round_trip():
    assert pa.parse_attribute_ref("document:a:1$public") == ("document", "a:1", "public")
    with pytest.raises(pa.AuthzInputError):
        pa.parse_attribute_ref("document:1")


def test_dialects():
    ok = pa.Tuple("document", "a@b.c", "viewer", "user", "x+y")
    assert pa.check_tuple(ok, pa.PERMIFY) == ok
    with pytest.raises(pa.AuthzInputError, match="entity.id"):
        pa.check_tuple(ok, pa.SPICEDB)  # '@' and '.' are not SpiceDB id characters
    spice = pa.Tuple("org/document", "a/b|c=d", "viewer", "user", "*")
    assert pa.check_tuple(spice, pa.SPICEDB) == spice
    for bad in [
        pa.Tuple("Doc", "1", "viewer", "user", "u"),
        pa.Tuple("doc", "*", "viewer", "user", "u"),
        pa.Tuple("doc", "1", "vi", "user", "u"),
        pa.Tuple("doc", "1", "viewer", "user", "u", "m!"),
    ]:
        with pytest.raises(pa.AuthzInputError):
            pa.check_tuple(bad, pa.SPICEDB)


@pytest.mark.parametrize(
    "value,ok",
    [
        ({"@type": "type.googleapis.com/base.v1.BooleanValue", "data": True}, True),
        ({"@type": "type.googleapis.com/base.v1.IntegerValue", "data": 7}, True),
        ({"@type": "type.googleapis.com/base.v1.IntegerValue", "data": 2**31}, False),
        ({"@type": "type.googleapis.com/base.v1.IntegerValue", "data": True}, False),
        ({"@type": "type.googleapis.com/base.v1.DoubleValue", "data": 1}, True),
        ({"@type": "type.googleapis.com/base.v1.StringArrayValue", "data": ["a", "b"]}, True),
        ({"@type": "type.googleapis.com/base.v1.StringArrayValue", "data": "a"}, False),
        ({"@type": "type.googleapis.com/base.v1.BooleanValue", "data": "true"}, False),
        ({"@type": "type.googleapis.com/base.v1.Nope", "data": 1}, False),
        ({"data": 1}, False),
        (True, False),
    ],
)
def test_check_value(value, ok):
    if ok:
        assert pa.check_value(value) == value
    else:
        with pytest.raises(pa.AuthzInputError):
            pa.check_value(value)


def test_tenant_rule():
    for good in ["t1", "a+b", "x@y.z:1-_", "*", "a" * 128]:
        assert pa.check_tenant(good) == good
    for bad in ["", "a b", "a/b", "a" * 129, "**", None]:
        with pytest.raises(pa.AuthzInputError):
            pa.check_tenant(bad)


def test_change_topic_is_valid_and_injective():
    tenants = ["t1", "a+b", "a_pb", "a__b", "a_b", "+", "_p", "x" * 128, "+" * 128, "+" * 127]
    topics = [pa.change_topic(t) for t in tenants]
    assert len(set(topics)) == len(topics)
    assert all(TOPIC_RE.fullmatch(t) for t in topics)
    assert pa.change_topic("t1") == "authz.t1"


def test_tokens():
    topic = pa.change_topic("t1")
    token = pa.encode_token(topic, 42)
    assert pa.decode_token(topic, token) == 42
    assert "=" not in token and base64.urlsafe_b64decode(token + "==").startswith(b"v1.")
    with pytest.raises(pa.AuthzInputError, match="different tenant"):
        pa.decode_token(pa.change_topic("t2"), token)
    for bad in [
        "",
        "garbage",
        "!!!",
        base64.urlsafe_b64encode(b"v2.1.abc").decode(),
        base64.urlsafe_b64encode(b"v1.-1.abc").decode(),
    ]:
        with pytest.raises(pa.AuthzInputError):
            pa.decode_token(topic, bad)


def test_matches():
    t = pa.Tuple("doc", "abc", "viewer", "team", "eng", "member")
    assert pa.matches(pa.TupleFilter(), t)
    assert pa.matches(
        pa.TupleFilter("doc", ("x", "abc"), "ab", "viewer", "team", ("eng",), "member"), t
    )
    assert not pa.matches(pa.TupleFilter(subject_relation=""), t)
    assert not pa.matches(pa.TupleFilter(entity_id_prefix="b"), t)
    assert not pa.matches(pa.TupleFilter(subject_ids=("ops",)), t)


def test_change_records_chunk_and_parse_back():
    a = pa.Attribute(
        "doc", "1", "public", {"@type": "type.googleapis.com/base.v1.BooleanValue", "data": False}
    )
    changes = [
        pa.Change("touch", tuple=pa.Tuple("doc", str(i), "viewer", "user", "u"))
        for i in range(1500)
    ] + [pa.Change("delete", attribute=a)]
    datas = pa.change_records("t1", "spicedb", changes, {"request_id": "r"})
    assert [len(orjson.loads(d)["changes"]) for d in datas] == [1000, 501]
    assert [orjson.loads(d)["part"] for d in datas] == [[1, 2], [2, 2]]
    first = orjson.loads(datas[0])
    assert first["changes"][0] == {"op": "touch", "tuple": "doc:0#viewer@user:u"}
    back = [c for d in datas for c in pa.parse_change_record(d).changes]
    assert back == changes
    assert pa.parse_change_record(datas[1]).metadata == {"request_id": "r"}
    single = pa.change_records("t1", "permify", changes[:1], None)
    assert orjson.loads(single[0]) == {
        "tenant": "t1",
        "source": "permify",
        "changes": [{"op": "touch", "tuple": "doc:0#viewer@user:u"}],
    }
    for junk in [b'"text"', b"{}", b'{"changes": [{"op": "x", "tuple": "d:1#r@u:1"}]}', b"{"]:
        with pytest.raises(pa.AuthzInputError):
            pa.parse_change_record(junk)


def test_permify_watch_line_shape():
    t = pa.Tuple("doc", "1", "viewer", "user", "u")
    line = pj.watch_line("tok", [pa.Change("touch", tuple=t), pa.Change("delete", tuple=t)])
    assert line == (
        b'{"result":{"changes":{"snap_token":"tok","data_changes":['
        b'{"operation":"OPERATION_CREATE","tuple":{"entity":{"type":"doc","id":"1"},'
        b'"relation":"viewer","subject":{"type":"user","id":"u","relation":""}}},'
        b'{"operation":"OPERATION_DELETE","tuple":{"entity":{"type":"doc","id":"1"},'
        b'"relation":"viewer","subject":{"type":"user","id":"u","relation":""}}}]}}}\n'
    )
    err = pj.error_line(pj.PermifyError(pj.NOT_FOUND, "gone"))
    assert err == b'{"error":{"code":5,"message":"gone","details":[]}}\n'


def test_schema_definition_names():
    text = (
        "entity user {}\nentity doc {\n relation owner @user\n attribute tags string[]\n"
        " permission edit = owner\n}"
    )
    d = pj.schema_body(permify_schema.parse(text))
    assert d["references"] == {"user": "REFERENCE_ENTITY", "doc": "REFERENCE_ENTITY"}
    assert (
        d["entity_definitions"]["doc"]["attributes"]["tags"]["type"]
        == "ATTRIBUTE_TYPE_STRING_ARRAY"
    )
    for bad in ["", "entity x {", "no entities here"]:
        with pytest.raises(permify_schema.SchemaError):
            permify_schema.parse(bad)
