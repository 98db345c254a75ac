"""The composite SSE cursor id, as the sink reads it: ``base64url`` (unpadded) of compact JSON
``{"topic": seq, ...}`` (seed 002, "Resume via the composite cursor").

The seed asks clients to treat the id as opaque (a server may send a checkpoint token for very
large topic sets), so :func:`decode` returns None for anything that is not an inline map and
the sink then falls back to the positions the frames themselves report.
"""
from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

import orjson

CursorMap = dict[str, int]


def encode(cursors: Mapping[str, int]) -> str:
    """The id for ``cursors``; keys keep their order, as the server's do."""
    return base64.urlsafe_b64encode(orjson.dumps(dict(cursors))).rstrip(b"=").decode("ascii")


def decode(frame_id: str) -> CursorMap | None:
    """The cursor map inside ``frame_id``, or None if it is not an inline map."""
    if not frame_id:
        return None
    try:
        raw = base64.urlsafe_b64decode(frame_id + "=" * (-len(frame_id) % 4))
        value = orjson.loads(raw)
    except (binascii.Error, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values()):
        return None
    return value
