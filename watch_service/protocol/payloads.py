"""Record payloads kept exactly as written (http-api.md, "Further decisions").

An audit log must not change what it was given: a number keeps its spelling
(``18446744073709551616``, ``1E2`` and ``1.10`` are stored and served as sent, never through a
float), and an object with a key twice, which every JSON reader collapses in its own way, is
refused rather than stored. Whitespace and string escapes are normalised to orjson's compact
spelling: SSE ``data:`` lines hold no newlines, and one spelling per value is what lets the
reconcile hash (over the stored text) match what a consumer re-encodes from a frame.

``loads_exact`` parses so that ``orjson.dumps`` of the result gives that spelling back: a
number orjson would re-spell (a float that does not round-trip, an integer beyond 64 bits,
``-0``) is kept as an ``orjson.Fragment`` of its text. The fast path is orjson itself: when
``orjson.dumps(orjson.loads(text)) == text`` nothing was re-spelled or collapsed (a duplicate
key, a changed number or any whitespace would change the text), which is the case for compact
bodies from ordinary JSON writers; anything else (and anything orjson refuses, such as
``1e400``) takes the exact, slower parse.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson

from watch_service.protocol.errors import AuditsyncError


class PayloadError(AuditsyncError, ValueError):
    """JSON text that cannot be kept exactly; the message says why."""


class DuplicateKey(PayloadError):
    """An object with ``key`` twice (raised by the parse, explained by ``loads_exact``)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


def _exact(text: str, kind: type) -> Any:
    try:
        value = kind(text)
        if orjson.dumps(value) == text.encode():
            return value
    except (OverflowError, orjson.JSONEncodeError):
        pass
    return orjson.Fragment(text)


def _exact_int(text: str) -> Any:
    # JSON has no leading zeros, so below 19 digits only "-0" is spelled otherwise by orjson.
    return int(text) if len(text) < 19 and text != "-0" else _exact(text, int)


def _exact_float(text: str) -> Any:
    return _exact(text, float)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_EXACT = json.JSONDecoder(
    object_pairs_hook=_unique,
    parse_int=_exact_int,
    parse_float=_exact_float,
    parse_constant=_refuse_constant,
)


def canonical(body: bytes) -> bytes:
    """``body`` in the one spelling the log stores (see the module docstring): ``body`` itself
    when it already is, which costs one orjson round trip; ``PayloadError`` as ``loads_exact``.

    Whitespace between tokens is what most often keeps a body from being canonical (the
    default separators of Python's ``json.dumps``, ``", "`` and ``": "``). msgspec drops it
    without touching a token; if what is left is orjson's own spelling, it is the answer
    ``loads_exact`` would give (the same values, no key twice, no number re-spelled), in a
    fraction of the exact parse's time."""
    try:
        if orjson.dumps(orjson.loads(body)) == body:
            return body
    except orjson.JSONDecodeError:
        pass  # loads_exact explains it, or keeps what orjson alone refuses (1e400)
    else:
        try:
            compact = msgspec.json.format(body, indent=-1)
            if orjson.dumps(orjson.loads(compact)) == compact:
                return compact
        except (msgspec.DecodeError, orjson.JSONDecodeError):
            pass
    return orjson.dumps(loads_exact(body))


def loads_exact(text: bytes | str) -> Any:
    """JSON values whose ``orjson.dumps`` keeps every number as written; ``PayloadError`` when
    ``text`` is not JSON or holds an object with a duplicate key."""
    raw = text.encode() if isinstance(text, str) else text
    refused: orjson.JSONDecodeError | None = None
    try:
        value = orjson.loads(raw)
        if orjson.dumps(value) == raw:
            return value
    except orjson.JSONDecodeError as exc:
        refused = exc  # orjson also refuses some JSON (1e400): the exact parse decides
    try:
        value = _EXACT.decode(raw.decode("utf-8"))
        orjson.dumps(value)  # what orjson refuses (a lone surrogate escape) is refused here
    except DuplicateKey as exc:
        raise PayloadError(
            f"an object has the key {exc.key!r} more than once; duplicate keys are refused "
            "so that the log keeps exactly what was written"
        ) from None
    except (ValueError, orjson.JSONEncodeError, RecursionError) as exc:
        raise PayloadError(f"malformed JSON ({refused or exc})") from None
    return value
