"""Permify REST bodies, pure: parse requests into ``protocol.authz`` values and render
responses, in the JSON the ``permify`` 1.7 client sends and reads (proto field names,
grpc-gateway shapes). ``PermifyError`` is this surface's one error type.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import orjson

from watch_service.protocol import authz as pa
from watch_service.protocol.errors import AuditsyncError

# gRPC status codes and the HTTP status grpc-gateway gives each.
INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED = 3, 5, 6, 7
UNAUTHENTICATED, UNAVAILABLE, INTERNAL = 16, 14, 13
HTTP_STATUS = {3: 400, 5: 404, 6: 409, 7: 403, 9: 400, 11: 400, 13: 500, 14: 503, 16: 401}
MAX_TUPLES = 100
MAX_PAGE = 100


class PermifyError(AuditsyncError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    def body(self) -> dict:
        return {"code": self.code, "message": self.message, "details": []}


def invalid(message: str) -> PermifyError:
    return PermifyError(INVALID_ARGUMENT, message)


def parse_body(raw: bytes, allowed: set[str]) -> dict:
    try:
        doc = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise invalid(f"body: malformed JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise invalid("body: expected a JSON object")
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise invalid(f"body: unknown field(s) {', '.join(unknown)}")
    return doc


def _obj(doc: Any, field: str) -> dict:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise invalid(f"{field}: expected an object")
    return doc


def _str(doc: dict, key: str, field: str) -> str:
    value = doc.get(key, "")
    if not isinstance(value, str):
        raise invalid(f"{field}.{key}: expected a string")
    return value


def _list(doc: dict, key: str, field: str, max_items: int | None = None) -> list:
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise invalid(f"{field}.{key}: expected an array")
    if max_items is not None and len(value) > max_items:
        raise invalid(f"{field}.{key}: {len(value)} items is over the limit of {max_items}")
    return value


def parse_tuple(doc: Any, field: str) -> pa.Tuple:
    doc = _obj(doc, field)
    entity, subject = (
        _obj(doc.get("entity"), f"{field}.entity"),
        _obj(doc.get("subject"), f"{field}.subject"),
    )
    t = pa.Tuple(
        _str(entity, "type", f"{field}.entity"),
        _str(entity, "id", f"{field}.entity"),
        _str(doc, "relation", field),
        _str(subject, "type", f"{field}.subject"),
        _str(subject, "id", f"{field}.subject"),
        _str(subject, "relation", f"{field}.subject"),
    )
    try:
        return pa.check_tuple(t, pa.PERMIFY, field)
    except pa.AuthzInputError as exc:
        raise invalid(str(exc)) from None


def parse_attribute(doc: Any, field: str) -> pa.Attribute:
    doc = _obj(doc, field)
    entity = _obj(doc.get("entity"), f"{field}.entity")
    a = pa.Attribute(
        _str(entity, "type", f"{field}.entity"),
        _str(entity, "id", f"{field}.entity"),
        _str(doc, "attribute", field),
        doc.get("value"),
    )
    try:
        return pa.check_attribute(a, field)
    except pa.AuthzInputError as exc:
        raise invalid(str(exc)) from None


def parse_tuples(doc: dict, key: str, min_items: int = 0) -> list[pa.Tuple]:
    items = _list(doc, key, "body", MAX_TUPLES)
    if len(items) < min_items:
        raise invalid(f"body.{key}: at least {min_items} item(s) required")
    return pa.unique(parse_tuple(t, f"{key}[{i}]") for i, t in enumerate(items))


def parse_attributes(doc: dict) -> list[pa.Attribute]:
    items = _list(doc, "attributes", "body", MAX_TUPLES)
    last = {}
    for i, a in enumerate(items):
        attr = parse_attribute(a, f"attributes[{i}]")
        last[(attr.entity_type, attr.entity_id, attr.name)] = attr  # the last write wins
    return list(last.values())


def parse_tuple_filter(doc: Any, field: str, require_type: bool) -> pa.TupleFilter:
    doc = _obj(doc, field)
    entity, subject = (
        _obj(doc.get("entity"), f"{field}.entity"),
        _obj(doc.get("subject"), f"{field}.subject"),
    )
    f = pa.TupleFilter(
        entity_type=_str(entity, "type", f"{field}.entity") or None,
        entity_ids=tuple(_strs(entity, "ids", f"{field}.entity")),
        relation=_str(doc, "relation", field) or None,
        subject_type=_str(subject, "type", f"{field}.subject") or None,
        subject_ids=tuple(_strs(subject, "ids", f"{field}.subject")),
        subject_relation=_str(subject, "relation", f"{field}.subject") or None,
    )
    if require_type and f.entity_type is None:
        raise invalid(f"{field}.entity.type: required")
    return f


def parse_attribute_filter(doc: Any, field: str) -> pa.AttributeFilter:
    doc = _obj(doc, field)
    entity = _obj(doc.get("entity"), f"{field}.entity")
    return pa.AttributeFilter(
        _str(entity, "type", f"{field}.entity") or None,
        tuple(_strs(entity, "ids", f"{field}.entity")),
        tuple(_strs(doc, "attributes", field)),
    )


def _strs(doc: dict, key: str, field: str) -> list[str]:
    items = _list(doc, key, field, 1000)
    if not all(isinstance(x, str) for x in items):
        raise invalid(f"{field}.{key}: expected an array of strings")
    return items


def page_size(doc: dict) -> int:
    size = doc.get("page_size") or MAX_PAGE
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAGE:
        raise invalid(f"page_size: expected an integer 1-{MAX_PAGE}, got {size!r}")
    return size


def tenant_body(t: tuple) -> dict:
    created: dt.datetime = t[2]
    stamp = created.astimezone(dt.UTC).isoformat(timespec="microseconds")
    return {"id": t[0], "name": t[1], "created_at": stamp.replace("+00:00", "Z")}


def tuple_body(t: pa.Tuple) -> dict:
    return {
        "entity": {"type": t.entity_type, "id": t.entity_id},
        "relation": t.relation,
        "subject": {"type": t.subject_type, "id": t.subject_id, "relation": t.subject_relation},
    }


def attribute_body(a: pa.Attribute) -> dict:
    return {
        "entity": {"type": a.entity_type, "id": a.entity_id},
        "attribute": a.name,
        "value": a.value,
    }


def data_change(c: pa.Change) -> dict:
    op = "OPERATION_DELETE" if c.op == "delete" else "OPERATION_CREATE"
    if c.tuple is not None:
        return {"operation": op, "tuple": tuple_body(c.tuple)}
    assert c.attribute is not None
    return {"operation": op, "attribute": attribute_body(c.attribute)}


def watch_line(snap_token: str, changes: list[pa.Change]) -> bytes:
    doc = {
        "result": {
            "changes": {"snap_token": snap_token, "data_changes": [data_change(c) for c in changes]}
        }
    }
    return orjson.dumps(doc) + b"\n"


def error_line(err: PermifyError) -> bytes:
    return orjson.dumps({"error": err.body()}) + b"\n"


# -- schema: stored as text; read renders names only (no permission evaluation here) ----------
_BLOCK = re.compile(r"\bentity\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", re.S)
_MEMBER = re.compile(
    r"\b(relation|attribute|permission|action)\s+([A-Za-z_][A-Za-z0-9_]*)"
    r"(?:\s+([A-Za-z_\[\]]+))?"
)
_ATTR_TYPES = {"boolean": "BOOLEAN", "string": "STRING", "integer": "INTEGER", "double": "DOUBLE"}


def check_schema(text: Any) -> str:
    if not isinstance(text, str) or not _BLOCK.search(text):
        raise invalid("schema: expected Permify schema text with at least one entity block")
    if text.count("{") != text.count("}"):
        raise invalid("schema: unbalanced braces")
    return text


def schema_definition(text: str) -> dict:
    """The SchemaDefinition shape with the entities, relations, attributes and permissions
    named in ``text`` (structure only: rewrites and relation references are not parsed)."""
    entities, refs = {}, {}
    for m in _BLOCK.finditer(text):
        body = text[m.end() : text.find("}", m.end())]
        ent: dict = {
            "name": m.group(1),
            "relations": {},
            "permissions": {},
            "attributes": {},
            "references": {},
        }
        for kind, name, typ in _MEMBER.findall(body):
            if kind == "relation":
                ent["relations"][name] = {"name": name}
                ent["references"][name] = "REFERENCE_RELATION"
            elif kind == "attribute":
                base = _ATTR_TYPES.get((typ or "").rstrip("[]"), "STRING")
                suffix = "_ARRAY" if (typ or "").endswith("[]") else ""
                ent["attributes"][name] = {"name": name, "type": f"ATTRIBUTE_TYPE_{base}{suffix}"}
                ent["references"][name] = "REFERENCE_ATTRIBUTE"
            else:
                ent["permissions"][name] = {"name": name}
                ent["references"][name] = "REFERENCE_PERMISSION"
        entities[m.group(1)] = ent
        refs[m.group(1)] = "REFERENCE_ENTITY"
    return {"entityDefinitions": entities, "ruleDefinitions": {}, "references": refs}
