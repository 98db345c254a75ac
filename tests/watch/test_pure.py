"""The watch's pure core without a socket: cursor ids, frame bytes, the stored definition."""

from __future__ import annotations

import base64

import pytest

from watch_service.protocol import cursor, frames
from watch_service.protocol.watch_request import WatchDefinition, watch_definition

from .wire import cursor_id

pytestmark = pytest.mark.unit


def test_cursor_ids_are_unpadded_base64url_json_in_map_order():
    cursors = {"orders": 5210, "notifications": 88130, "audit": 990}
    assert cursor.encode(cursors) == cursor_id(cursors)
    assert (
        base64.urlsafe_b64decode(cursor.encode(cursors) + "==")
        == b'{"orders":5210,"notifications":88130,"audit":990}'
    )
    assert "=" not in cursor.encode({"a": 1}) and cursor.decode(cursor.encode(cursors)) == cursors
    assert list(cursor.decode(cursor.encode(cursors))) == list(cursors)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "%%%",
        cursor_id({"a": -1}),
        cursor_id({"a": True}),
        base64.urlsafe_b64encode(b"[1]").decode(),
        "é",
        "x" * 1_000_001,
    ],
)
def test_garbage_cursor_ids_decode_to_none(value):
    assert cursor.decode(value) is None


def test_rewind_only_moves_back_and_ignores_unknown_topics():
    server = {"a": 10, "b": 20}
    assert cursor.rewind(server, None) == server
    assert cursor.rewind(server, {"a": 5, "b": 25, "zz": 0}) == {"a": 5, "b": 20}
    assert list(cursor.rewind(server, {"b": 1, "a": 1})) == ["a", "b"]


def test_frame_bytes():
    assert frames.retry(2000) == b"retry: 2000\n\n"
    assert frames.RETRY_MS == 2000
    assert frames.HEARTBEAT == b": hb\n\n"
    assert (
        frames.frame("caught-up", frames.caught_up_data("o", 5), "ID")
        == b'id: ID\nevent: caught-up\ndata: {"topic":"o","head_seq":5}\n\n'
    )
    assert frames.frame("tombstone", frames.tombstone_data("o", "cap", 2, 5, 6, 8), "ID") == (
        b'id: ID\nevent: tombstone\ndata: {"topic":"o","reason":"cap","gap_from":2,"gap_to":5,'
        b'"earliest_seq":6,"head_seq":8}\n\n'
    )
    assert (
        frames.record_data("o", ['{"$seq":3,"$ts":1,"data":1}'], 2, 3, 9)
        == '{"topic":"o","records":[{"$seq":3,"$ts":1,"data":1}],"from_seq":2,"to_seq":3,"head_seq":9}'  # noqa: E501
    )
    assert (
        frames.error_frame("unavailable", "bye")
        == b'event: error\ndata: {"code":"unavailable","message":"bye"}\n\n'
    )


def test_stored_definition_keeps_the_topic_order():
    d = watch_definition(b'{"topics":{"zzzz-long":{"from_seq":3},"b":{"tail":true},"mm":{}}}')
    doc = d.to_json()
    # A store that sorts keys (jsonb) must not change the session's topic order.
    shuffled = {**doc, "topics": dict(sorted(doc["topics"].items()))}
    assert list(WatchDefinition.from_json(shuffled).topics) == ["zzzz-long", "b", "mm"]
    assert WatchDefinition.from_json(shuffled) == d
