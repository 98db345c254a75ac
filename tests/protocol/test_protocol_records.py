"""Unit tests for the record wire shape: stored JSON text is spliced in, never re-serialised."""

from __future__ import annotations

import orjson
import pytest

from watch_service.protocol.records import Record, encode, encode_list

pytestmark = pytest.mark.unit


def test_minimal_record():
    rec = Record(seq=7, ts=1748467200111, tag=None, node=None, meta=None, data='{"x":1}')
    assert encode(rec) == '{"$seq":7,"$ts":1748467200111,"data":{"x":1}}'


def test_full_record_field_order_and_escaping():
    rec = Record(4097, 1748467200111, 'ta"g', "nø\\de", '{"k":"v"}', '[1,"two",null]')
    text = encode(rec)
    assert text == (
        '{"$seq":4097,"$ts":1748467200111,"$tag":"ta\\"g","$node":"nø\\\\de",'
        '"meta":{"k":"v"},"data":[1,"two",null]}'
    )
    assert orjson.loads(text) == {
        "$seq": 4097,
        "$ts": 1748467200111,
        "$tag": 'ta"g',
        "$node": "nø\\de",
        "meta": {"k": "v"},
        "data": [1, "two", None],
    }


@pytest.mark.parametrize("data", ["null", "0", '"s"', "true", "{}", "[]", '{"a":{"b":[1.5]}}'])
def test_any_json_data_round_trips(data):
    rec = Record(1, 2, None, None, None, data)
    assert orjson.loads(encode(rec))["data"] == orjson.loads(data)


def test_flags_leave_out_parts_but_never_seq_ts_or_node():
    rec = Record(1, 2, "t", "n", '{"m":1}', '"d"')
    assert encode(rec, include_meta=False) == '{"$seq":1,"$ts":2,"$tag":"t","$node":"n","data":"d"}'
    assert (
        encode(rec, include_tags=False)
        == '{"$seq":1,"$ts":2,"$node":"n","meta":{"m":1},"data":"d"}'
    )
    assert (
        encode(rec, include_data=False)
        == '{"$seq":1,"$ts":2,"$tag":"t","$node":"n","meta":{"m":1}}'
    )
    assert (
        encode(rec, include_meta=False, include_tags=False, include_data=False)
        == '{"$seq":1,"$ts":2,"$node":"n"}'
    )


def test_encode_list():
    recs = [Record(i, 10 + i, None, None, None, str(i)) for i in (1, 2, 3)]
    assert encode_list([]) == "[]"
    text = encode_list(recs, include_data=False)
    assert text == '[{"$seq":1,"$ts":11},{"$seq":2,"$ts":12},{"$seq":3,"$ts":13}]'
    assert [r["data"] for r in orjson.loads(encode_list(recs))] == [1, 2, 3]
