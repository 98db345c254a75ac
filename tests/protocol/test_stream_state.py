"""Unit tests for the SSE stream's state machine: cursors, frame ids, live/caught-up, the
tombstone rule and the node filter, with exact frame bytes and no socket.

Frame ids are written out literally (base64url of the compact cursor map in session order),
e.g. ``eyJhIjozLCJiIjowfQ`` is ``{"a":3,"b":0}``.
"""

from __future__ import annotations

import pytest

from watch_service.protocol.records import Record
from watch_service.protocol.stream_state import FROM_SEQ_TOO_OLD, Loss, Outgoing, StreamState

pytestmark = pytest.mark.unit

ID_A0_B0 = "eyJhIjowLCJiIjowfQ"  # {"a":0,"b":0}
ID_A2_B0 = "eyJhIjoyLCJiIjowfQ"  # {"a":2,"b":0}
ID_A3_B0 = "eyJhIjozLCJiIjowfQ"  # {"a":3,"b":0}
ID_A5_B0 = "eyJhIjo1LCJiIjowfQ"  # {"a":5,"b":0}
ID_A9_B0 = "eyJhIjo5LCJiIjowfQ"  # {"a":9,"b":0}
ID_A2_B7 = "eyJhIjoyLCJiIjo3fQ"  # {"a":2,"b":7}
ID_A12_B0 = "eyJhIjoxMiwiYiI6MH0"  # {"a":12,"b":0}


def rec(seq: int, node: str | None = None) -> tuple[Record, str]:
    return Record(seq, 0, None, node, None, "1"), f'{{"$seq":{seq}}}'


def state(**kw) -> StreamState:
    return StreamState({"a": 0, "b": 0}, {"a": 0, "b": 0}, **kw)


def test_a_cursor_moves_only_once_its_frame_is_written():
    s = state()
    out = s.records("a", [rec(1), rec(2)], 9)
    assert out == Outgoing(
        "a",
        "record",
        2,
        (
            b"id: " + ID_A2_B0.encode() + b'\nevent: record\ndata: {"topic":"a","records":'
            b'[{"$seq":1},{"$seq":2}],"from_seq":0,"to_seq":2,"head_seq":9}\n\n'
        ),
    )
    assert s.cursors == {"a": 0, "b": 0} and not s.dirty
    s.written(out)
    assert s.cursors == {"a": 2, "b": 0} and s.dirty


def test_frame_ids_carry_every_topic_in_session_order():
    s = state()
    s.written(s.records("a", [rec(2)], 2))
    out = s.records("b", [rec(7)], 7)
    assert out.data.startswith(b"id: " + ID_A2_B7.encode() + b"\n")
    assert b'"from_seq":0,"to_seq":7' in out.data
    s.written(out)
    assert list(s.cursors.items()) == [("a", 2), ("b", 7)]


def test_the_node_filter_drops_own_records_from_the_frame():
    s = state(node="me")
    out = s.records("a", [rec(1, "me"), rec(2, "other"), rec(3)], 3)
    assert out.cursor == 3
    assert out.data == (
        b"id: " + ID_A3_B0.encode() + b'\nevent: record\ndata: {"topic":"a",'
        b'"records":[{"$seq":2},{"$seq":3}],"from_seq":0,"to_seq":3,'
        b'"head_seq":3}\n\n'
    )


def test_a_page_of_only_own_records_moves_the_cursor_without_a_frame():
    s = state(node="me")
    assert s.records("a", [rec(1, "me"), rec(2, "me")], 5) is None
    assert s.cursors == {"a": 2, "b": 0} and s.dirty


@pytest.mark.parametrize(
    "strong, flushed, expected",
    [(False, False, 10), (False, True, 10), (True, False, 7), (True, True, 10)],
)
def test_the_delivery_bound(strong, flushed, expected):
    assert state(strong=strong).upto(10, 7, flushed) == expected


def test_caught_up_once_at_the_head_then_live():
    s = state()
    settled = s.settle("a", True, 0, 0)
    assert settled.drained
    assert settled.caught_up == Outgoing(
        "a",
        "caught-up",
        0,
        b"id: " + ID_A0_B0.encode() + b'\nevent: caught-up\ndata: {"topic":"a","head_seq":0}\n\n',
    )
    assert not s.live["a"]  # not until the frame is written
    s.written(settled.caught_up)
    assert s.live == {"a": True, "b": False}
    assert s.settle("a", True, 0, 0).caught_up is None  # live: no second caught-up


def test_a_page_short_of_the_bound_is_not_drained_and_ends_live():
    s = state()
    s.written(s.settle("a", True, 0, 0).caught_up)
    s.written(s.records("a", [rec(1), rec(2)], 9))
    settled = s.settle("a", False, 9, 9)
    assert settled.drained is False and settled.caught_up is None
    assert s.live["a"] is False
    s.written(s.records("a", [rec(n) for n in range(3, 10)], 9))
    again = s.settle("a", False, 9, 9)
    assert again.drained and again.caught_up.data == (
        b"id: " + ID_A9_B0.encode() + b'\nevent: caught-up\ndata: {"topic":"a","head_seq":9}\n\n'
    )


def test_strong_waits_for_the_flush_before_caught_up():
    s = state(strong=True)
    s.written(s.records("a", [rec(1), rec(2), rec(3)], 5))
    settled = s.settle("a", False, 3, 5)  # durable head 3, head 5: drained, not yet caught up
    assert settled.drained and settled.caught_up is None and not s.live["a"]
    s.written(s.records("a", [rec(4), rec(5)], 5))
    assert s.settle("a", False, 5, 5).caught_up.cursor == 5


def test_no_loss_while_the_history_is_retained():
    s = state()
    assert s.loss("a", 0, 1) is None
    assert s.loss("a", 10, 11) is None
    assert s.loss("a", 50, 11) is None


def test_a_gap_under_the_requested_from_seq_is_from_seq_too_old():
    s = StreamState({"a": 0, "b": 0}, {"a": 0, "b": 4})
    assert s.loss("a", 0, 5) == Loss(1, 4, FROM_SEQ_TOO_OLD)
    assert s.loss("b", 0, 5) == Loss(1, 4, None)  # a rewound cursor, not the requested start


def test_a_gap_after_going_live_carries_the_stored_reason():
    s = state()
    s.written(s.settle("a", True, 0, 0).caught_up)
    assert s.loss("a", 0, 5) == Loss(1, 4, None)


def test_a_gap_after_the_cursor_moved_carries_the_stored_reason():
    s = state()
    s.written(s.records("a", [rec(1)], 1))
    assert s.loss("a", 1, 5) == Loss(2, 4, None)


def test_the_tombstone_moves_the_cursor_past_the_gap():
    s = state()
    out = s.tombstone("a", Loss(1, 4, FROM_SEQ_TOO_OLD), FROM_SEQ_TOO_OLD, 5, 8)
    assert out == Outgoing(
        "a",
        "tombstone",
        4,
        (
            b'id: eyJhIjo0LCJiIjowfQ\nevent: tombstone\ndata: {"topic":"a","reason":'
            b'"from_seq_too_old","gap_from":1,"gap_to":4,"earliest_seq":5,"head_seq":8}\n\n'
        ),
    )
    s.written(out)
    assert s.cursors["a"] == 4


@pytest.mark.parametrize(
    "after, head, cursor, frame_id", [(3, 12, 12, ID_A12_B0), (5, 2, 5, ID_A5_B0)]
)
def test_topic_deleted_ends_at_the_final_head(after, head, cursor, frame_id):
    out = state().topic_deleted("a", after, head)
    assert out == Outgoing(
        "a",
        "topic-deleted",
        cursor,
        (
            b"id: "
            + frame_id.encode()
            + b'\nevent: topic-deleted\ndata: {"topic":"a","head_seq":'
            + str(head).encode()
            + b',"reason":"deleted"}\n\n'
        ),
    )


def test_a_one_topic_stream_is_pushed_the_shared_frame_as_it_is():
    """A one-topic stream at the push's cursor gets the shared frame's own bytes, id included
    (``solo``, built once for all of them), and moves to its cursor; one elsewhere, none."""
    from watch_service.protocol.stream_state import SharedFrame, record_body

    live = StreamState({"a": 0}, {"a": 0})
    live.written(live.settle("a", True, 0, 0).caught_up)  # live at 0
    live.dirty = False
    body = record_body("a", [rec(1), rec(2)], None, 0, 2)
    shared = SharedFrame("a", 2, body)
    assert live.pushed("a", 0, [shared], 2, 2) == [Outgoing("a", "record", 2, shared.solo())]
    assert live.cursors == {"a": 2} and live.dirty and live.live["a"]
    assert shared.solo() is shared.solo()
    assert live.pushed("a", 0, [shared], 2, 2) is None  # no longer at 0: it pages


@pytest.mark.parametrize(
    ("cursor", "claimed", "head", "expected"),
    [
        (9, None, 9, None),  # at the head: nothing went back
        (5, {"a": 9}, 9, None),  # an id ahead of the session's cursor, within the head
        (9, None, 3, (4, 9, 3)),  # the stream's own cursor above the head
        (3, {"a": 9}, 3, (4, 9, 3)),  # the presented id above a head the session sits at
        (9, {"a": 5}, 3, (4, 9, 3)),  # the higher of the two names the range
    ],
)
def test_a_cursor_above_the_head_is_said_in_a_rewound_frame(cursor, claimed, head, expected):
    s = StreamState({"a": cursor, "b": 0}, {"a": 0, "b": 0}, claimed=claimed)
    s.live["a"] = True
    out = s.rewound("a", head)
    if expected is None:
        assert out is None and s.cursors["a"] == cursor and s.claimed == {}
        return
    gap_from, gap_to, back_to = expected
    assert out == Outgoing(
        "a",
        "rewound",
        back_to,
        b"id: " + ID_A3_B0.encode() + b"\nevent: rewound\ndata: "
        b'{"topic":"a","reason":"source_rewound","gap_from":%d,"gap_to":%d,"head_seq":3}\n\n'
        % (gap_from, gap_to),
    )
    s.written(out)
    assert (s.cursors["a"], s.live["a"], s.claimed) == (3, False, {})
    assert s.rewound("a", head) is None  # said once
