"""Composite cursor ids: base64url (unpadded) of the compact JSON map ``{topic: seq}``.

``decode`` never raises: a garbage ``Last-Event-ID`` is treated as absent.
"""

from __future__ import annotations

import base64
import binascii

import orjson


def encode(cursors: dict[str, int]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(cursors)).rstrip(b"=").decode()


def decode(value: str | None) -> dict[str, int] | None:
    if not value or len(value) > 1_000_000:
        return None
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        doc = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    out = {}
    for topic, seq in doc.items():
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            return None
        out[topic] = seq
    return out


def rewind(server: dict[str, int], client: dict[str, int] | None) -> dict[str, int]:
    """Server cursors are authoritative; the client's map may only move a topic back."""
    if not client:
        return dict(server)
    return {t: min(seq, client[t]) if t in client else seq for t, seq in server.items()}
