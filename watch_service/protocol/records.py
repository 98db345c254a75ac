"""The record's wire shape, shared by the Records API and SSE frames.

Stored payloads are already-compact JSON text; encoding splices them in rather than parsing
and re-serialising, so a record costs one string join on the way out.
"""

from __future__ import annotations

import dataclasses

import orjson


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    seq: int
    ts: int
    tag: str | None
    node: str | None
    meta: str | None  # JSON text
    data: str  # JSON text


def encode(
    rec: Record, *, include_meta: bool = True, include_tags: bool = True, include_data: bool = True
) -> str:
    parts = ['{"$seq":', str(rec.seq), ',"$ts":', str(rec.ts)]
    if include_tags and rec.tag is not None:
        parts += [',"$tag":', orjson.dumps(rec.tag).decode()]
    if rec.node is not None:
        parts += [',"$node":', orjson.dumps(rec.node).decode()]
    if include_meta and rec.meta is not None:
        parts += [',"meta":', rec.meta]
    if include_data:
        parts += [',"data":', rec.data]
    parts.append("}")
    return "".join(parts)


def encode_list(records: list[Record], **flags: bool) -> str:
    return "[" + ",".join(encode(r, **flags) for r in records) + "]"
