"""Validation of the Topics and Records request bodies and query strings.

Each function takes what arrived (bytes or a query mapping) and returns plain, checked values,
or raises ``ApiError`` naming the field and the rule it broke. Nothing is written before all of
a request has passed, which is how a bad batch leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec
import orjson

from watch_service.protocol import payloads
from watch_service.protocol.errors import InvalidRequest, PayloadTooLarge
from watch_service.protocol.names import check_node

MAX_BATCH = 1000
MAX_READ_LIMIT = 10_000
DEFAULT_READ_LIMIT = 256
MAX_TAG_CHARS = 256
INT63 = 2**63 - 1
_ABSENT = msgspec.Raw(b"")  # a record field that was not sent
_NULL = msgspec.Raw(b"null")
# int() alone also takes '1_000', ' 10' and non-ASCII digits; a query integer is plain digits.
_QUERY_INT = re.compile(r"-?[0-9]+")


def parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"body: malformed JSON ({exc})") from None


def _object(value: Any, field: str, allowed: set[str]) -> dict:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field}: expected a JSON object, got {type_name(value)}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise InvalidRequest(
            f"{field}: unknown field(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )
    return value


def type_name(value: Any) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        type(None): "null",
        int: "integer",
        float: "number",
    }.get(type(value), "value")


def check_int(value: Any, field: str, lo: int, hi: int = INT63) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{field}: expected an integer, got {type_name(value)}")
    if not lo <= value <= hi:
        raise InvalidRequest(f"{field}: {value} is out of range [{lo}, {hi}]")
    return value


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    max_records: int | None
    ttl_ms: int | None


def topic_config(body: bytes) -> TopicConfig:
    doc = parse_json(body) if body.strip() else {}
    doc = _object(doc, "body", {"max_records", "ttl_ms"})
    values = {}
    for field in ("max_records", "ttl_ms"):
        raw = doc.get(field)
        values[field] = None if raw is None else check_int(raw, field, 1)
    return TopicConfig(**values)


class NewRecord(NamedTuple):
    """A validated record; ``data`` and ``meta`` are compact JSON text with every value as sent.

    A tuple, not a dataclass: a batch builds a thousand of them, and the store transposes them
    into its column arrays in one ``zip``."""

    data: str
    meta: str | None
    tag: str | None
    node: str | None


class _RawRecord(msgspec.Struct, forbid_unknown_fields=True):
    data: msgspec.Raw = _ABSENT
    meta: msgspec.Raw = _ABSENT
    tag: str | None = None
    node: str | None = None


class _RawBody(msgspec.Struct, forbid_unknown_fields=True):
    records: list[_RawRecord]


_APPEND_BODY = msgspec.json.Decoder(_RawBody)


def new_records(body: bytes, max_record_bytes: int) -> list[NewRecord]:
    """The records of an append body, each ``data`` and ``meta`` exactly as sent.

    The body is first made canonical (``protocol/payloads``: duplicate keys refused, numbers as
    written, whitespace and escapes normalised; a compact body usually already is), then split
    by msgspec into its records with ``data`` and ``meta`` left as slices of that text, so no
    Python object is built for a payload and none is re-encoded."""
    try:
        text = payloads.canonical(body)
    except payloads.PayloadError as exc:
        raise InvalidRequest(f"body: {exc}") from None
    try:
        records = _APPEND_BODY.decode(text).records
    except msgspec.ValidationError as exc:
        _explain(payloads.loads_exact(text))
        raise InvalidRequest(f"body: {exc}") from None  # a shape _explain does not name
    if not 1 <= len(records) <= MAX_BATCH:
        raise InvalidRequest(f"records: expected 1-{MAX_BATCH} records, got {len(records)}")
    out = []
    for i, rec in enumerate(records):
        if not rec.data:
            raise InvalidRequest(f"records[{i}].data: required")
        meta = None if not rec.meta or rec.meta == _NULL else str(rec.meta, "utf-8")
        if meta is not None and meta[0] != "{":
            kind = type_name(payloads.loads_exact(meta))
            raise InvalidRequest(f"records[{i}].meta: expected an object, got {kind}")
        tag, node = rec.tag, rec.node
        if tag is not None and (not 1 <= len(tag) <= MAX_TAG_CHARS or "\x00" in tag):
            _check_tag(tag, f"records[{i}].tag")
        if node is not None and not _valid_node(node):
            check_node(node, f"records[{i}].node")
        size = len(rec.data) + (len(rec.meta) if meta is not None else 0)
        if size > max_record_bytes:
            raise PayloadTooLarge(
                f"records[{i}]: {size} bytes of data+meta is over the per-record limit "
                f"of {max_record_bytes} bytes"
            )
        out.append(NewRecord(str(rec.data, "utf-8"), meta, tag, node))
    return out


@functools.lru_cache(maxsize=1024)
def _valid_node(node: str) -> bool:
    """Writers reuse a few node names: each is checked once (bounded: 1024 names of <= 128)."""
    try:
        check_node(node)
    except InvalidRequest:
        return False
    return True


def _check_tag(tag: Any, field: str) -> None:
    if not isinstance(tag, str) or not 1 <= len(tag) <= MAX_TAG_CHARS or "\x00" in tag:
        raise InvalidRequest(
            f"{field}: expected a string of 1-{MAX_TAG_CHARS} characters without NUL"
        )


def _explain(doc: Any) -> None:
    """Raise the message naming what is wrong with the shape of an append body (the slow path,
    taken once the fast decoder has refused it)."""
    doc = _object(doc, "body", {"records"})
    records = doc.get("records")
    if not isinstance(records, list):
        raise InvalidRequest(
            f"records: expected an array of 1-{MAX_BATCH} records, got {type_name(records)}"
        )
    if not 1 <= len(records) <= MAX_BATCH:
        raise InvalidRequest(f"records: expected 1-{MAX_BATCH} records, got {len(records)}")
    for i, rec in enumerate(records):
        field = f"records[{i}]"
        rec = _object(rec, field, {"data", "meta", "tag", "node"})
        if "data" not in rec:
            raise InvalidRequest(f"{field}.data: required")
        meta = rec.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise InvalidRequest(f"{field}.meta: expected an object, got {type_name(meta)}")
        if rec.get("tag") is not None:
            _check_tag(rec["tag"], f"{field}.tag")
        if rec.get("node") is not None:
            check_node(rec["node"], f"{field}.node")


@dataclasses.dataclass(frozen=True)
class ReadQuery:
    from_seq: int
    limit: int


def _query_int(query: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        if not _QUERY_INT.fullmatch(raw):
            raise ValueError(raw)
        value = int(raw, 10)
    except ValueError:
        raise InvalidRequest(f"{name}: expected an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise InvalidRequest(f"{name}: {value} is out of range [{lo}, {hi}]")
    return value


def read_query(query: Mapping[str, str]) -> ReadQuery:
    unknown = sorted(set(query) - {"from_seq", "limit", "token"})
    if unknown:
        raise InvalidRequest(
            f"query: unknown parameter(s) {', '.join(unknown)} (allowed: from_seq, limit)"
        )
    return ReadQuery(
        from_seq=_query_int(query, "from_seq", 0, 0, INT63),
        limit=_query_int(query, "limit", DEFAULT_READ_LIMIT, 1, MAX_READ_LIMIT),
    )
