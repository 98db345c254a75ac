"""SSE frame bytes for the watch stream (seed 002 + spec/http-api.md).

Every data frame is ``id: <cursor>\\nevent: <type>\\ndata: <json>\\n\\n``; the heartbeat is
exactly ``: hb\\n\\n`` with no id; ``retry:`` is sent once at open.
"""

from __future__ import annotations

import orjson

HEARTBEAT = b": hb\n\n"
RETRY_MS = 2000  # the reconnect delay the server announces, and clients assume until told


def retry(ms: int) -> bytes:
    return f"retry: {ms}\n\n".encode()


def frame(event: str, data: str, frame_id: str | None = None) -> bytes:
    body = frame_body(event, data)
    return body if frame_id is None else with_id(frame_id, body)


def frame_body(event: str, data: str) -> bytes:
    """A frame without its ``id`` line: a record frame pushed to many streams is encoded once
    as this and only the id is put in front of it per stream."""
    return f"event: {event}\ndata: {data}\n\n".encode()


def with_id(frame_id: str, body: bytes) -> bytes:
    return b"id: " + frame_id.encode() + b"\n" + body


def record_data(
    topic: str, encoded_records: list[str], from_seq: int, to_seq: int, head_seq: int
) -> str:
    return (
        f'{{"topic":{orjson.dumps(topic).decode()},"records":[{",".join(encoded_records)}],'
        f'"from_seq":{from_seq},"to_seq":{to_seq},"head_seq":{head_seq}}}'
    )


def tombstone_data(
    topic: str, reason: str, gap_from: int, gap_to: int, earliest_seq: int, head_seq: int
) -> str:
    return orjson.dumps(
        {
            "topic": topic,
            "reason": reason,
            "gap_from": gap_from,
            "gap_to": gap_to,
            "earliest_seq": earliest_seq,
            "head_seq": head_seq,
        }
    ).decode()


def rewound_data(topic: str, reason: str, gap_from: int, gap_to: int, head_seq: int) -> str:
    return orjson.dumps(
        {
            "topic": topic,
            "reason": reason,
            "gap_from": gap_from,
            "gap_to": gap_to,
            "head_seq": head_seq,
        }
    ).decode()


def caught_up_data(topic: str, head_seq: int) -> str:
    return orjson.dumps({"topic": topic, "head_seq": head_seq}).decode()


def topic_deleted_data(topic: str, head_seq: int) -> str:
    return orjson.dumps({"topic": topic, "head_seq": head_seq, "reason": "deleted"}).decode()


def error_frame(code: str, message: str) -> bytes:
    return frame("error", orjson.dumps({"code": code, "message": message}).decode())
