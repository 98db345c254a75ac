"""Composite cursor ids (the SSE ``id:``) as Spark columns: base64url, unpadded, of the JSON
map ``{topic: seq}``. Undecodable ids become null, never an error: the seed allows a server to
send an opaque checkpoint token instead of the inline map."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def cursor_map(frame_id: Column) -> Column:
    """``map<string, bigint>`` of a composite cursor id, or null."""
    raw = F.try_to_binary(F.translate(frame_id, "-_", "+/"), F.lit("base64"))
    return F.from_json(F.try_validate_utf8(raw.cast("string")), "map<string,bigint>")


def topic_cursor(frame_id: Column, topic: Column) -> Column:
    """The cursor of ``topic`` in ``frame_id``, or null (undecodable id, topic absent)."""
    return F.try_element_at(cursor_map(frame_id), topic)
