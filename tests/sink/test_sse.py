"""The SSE parser against the WHATWG rules: line endings, split chunks, BOM, fields."""

import pytest

from watch_service.sink.sse import Comment, Event, Retry, SseParser

pytestmark = pytest.mark.unit


def parse_all(chunks: list[bytes], last_id: str = "") -> list:
    parser = SseParser(last_id)
    out = []
    for c in chunks:
        out.extend(parser.feed(c))
    return out


WIRE = (
    b"retry: 2000\n\n"
    b'id: eyJhIjoxfQ\nevent: record\ndata: {"topic":"a"}\n\n'
    b": hb\n\n"
    b'id: eyJhIjoyfQ\nevent: caught-up\ndata: {"topic":"a","head_seq":2}\n\n'
)
EXPECTED = [
    Retry(2000),
    Event("record", '{"topic":"a"}', "eyJhIjoxfQ"),
    Comment("hb"),
    Event("caught-up", '{"topic":"a","head_seq":2}', "eyJhIjoyfQ"),
]


def test_whole_stream():
    assert parse_all([WIRE]) == EXPECTED


@pytest.mark.parametrize("eol", [b"\r\n", b"\r", b"\n"])
def test_every_line_ending(eol):
    assert parse_all([WIRE.replace(b"\n", eol)]) == EXPECTED


@pytest.mark.parametrize("eol", [b"\r\n", b"\r", b"\n"])
def test_split_at_every_byte(eol):
    wire = WIRE.replace(b"\n", eol)
    assert parse_all([wire[i : i + 1] for i in range(len(wire))]) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    # "\r" ends the chunk; the "\n" that follows must not count as a blank line.
    items = parse_all([b"data: a\r", b"\ndata: b\r\n\r\n"])
    assert items == [Event("message", "a\nb", "")]


def test_cr_dispatches_without_waiting_for_the_next_chunk():
    parser = SseParser()
    assert parser.feed(b"data: x\r\r") == [Event("message", "x", "")]


def test_bom_skipped_once_even_when_split():
    bom = "\ufeff".encode()
    assert parse_all([bom[:1], bom[1:] + b"data: x\n\n"]) == [Event("message", "x", "")]
    # A second BOM is not at the start of the stream: it is part of the field name.
    assert parse_all([bom + bom + b"data: x\n\n"]) == []


def test_utf8_split_inside_a_character():
    wire = "data: é€\n\n".encode()
    assert parse_all([wire[i : i + 1] for i in range(len(wire))]) == [Event("message", "é€", "")]


def test_multiline_data_joins_with_newline_and_drops_one_space():
    items = parse_all([b"data:a\ndata:  b\ndata\ndata: \n\n"])
    assert items == [Event("message", "a\n b\n\n", "")]


def test_blank_line_without_data_dispatches_nothing_but_keeps_the_id():
    parser = SseParser()
    assert parser.feed(b"id: 7\nevent: x\n\n") == []
    assert parser.last_event_id == "7"
    assert parser.feed(b"data: y\n\n") == [Event("message", "y", "7")]


def test_id_with_nul_is_ignored_and_empty_id_resets():
    assert parse_all([b"id: 1\n\nid: a\0b\ndata: x\n\n"]) == [Event("message", "x", "1")]
    assert parse_all([b"id: 1\n\nid\ndata: x\n\n"]) == [Event("message", "x", "")]


def test_initial_last_event_id_carries_over():
    assert parse_all([b"data: x\n\n"], last_id="abc") == [Event("message", "x", "abc")]


def test_retry_only_digits():
    assert parse_all([b"retry: 12a\nretry: -5\nretry:\nretry: 750\n"]) == [Retry(750)]


def test_unknown_fields_and_incomplete_event_at_eof():
    assert parse_all([b"foo: bar\ndata: x\n\ndata: unfinished\n"]) == [Event("message", "x", "")]


def test_event_type_resets_after_dispatch():
    items = parse_all([b"event: tombstone\ndata: 1\n\ndata: 2\n\n"])
    assert items == [Event("tombstone", "1", ""), Event("message", "2", "")]


def test_large_frame_in_many_chunks():
    payload = "x" * 300_000
    wire = f"id: big\nevent: record\ndata: {payload}\n\n".encode()
    chunks = [wire[i : i + 4096] for i in range(0, len(wire), 4096)]
    assert parse_all(chunks) == [Event("record", payload, "big")]
