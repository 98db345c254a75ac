"""Permify REST bodies, pure: parse requests into ``protocol.authz`` values and render
responses, in the JSON the ``permify`` 1.7 client sends and reads (proto field names,
grpc-gateway shapes). ``PermifyError`` is this surface's one error type.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from watch_service.protocol import authz as pa
from watch_service.protocol import nul
from watch_service.protocol.errors import AuditsyncError

# gRPC status codes and the HTTP status grpc-gateway gives each.
INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED = 3, 5, 6, 7
FAILED_PRECONDITION, UNAUTHENTICATED, UNAVAILABLE, INTERNAL = 9, 16, 14, 13
HTTP_STATUS = {3: 400, 5: 404, 6: 409, 7: 403, 9: 400, 11: 400, 13: 500, 14: 503, 16: 401}
MAX_DATA_PER_WRITE = 1000  # Permify's database.max_data_per_write default
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


def parse_body(raw: bytes) -> dict:
    """A request body: a JSON object; unknown fields are ignored, as Permify's gateway does."""
    try:
        doc = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise invalid(f"body: malformed JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise invalid("body: expected a JSON object")
    return check_no_nul(doc)


def check_no_nul(doc: Any, path: str = "body") -> Any:
    """``doc``, unless a string in it holds a NUL (``protocol.nul``): the one check of a
    Permify body and of what a page token decodes to."""
    found = nul.find_nul(doc, path)
    if found is not None:
        raise invalid(nul.message(found))
    return doc


def obj(doc: dict, key: str) -> dict:
    """``doc[key]`` as an object ({} when absent or null)."""
    return _obj(doc.get(key), key)


def text(doc: dict, key: str, field: str) -> str:
    """``doc[key]`` as a string ("" when absent or null)."""
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise invalid(f"{field + '.' if field else ''}{key}: expected a string")
    return value


def new_tenant_id(raw: Any) -> str:
    try:
        tenant = pa.check_tenant(raw, "id")
    except pa.AuthzInputError as exc:
        raise invalid(str(exc)) from None
    if tenant == "*":
        raise invalid("id: '*' is reserved and cannot be created")
    return tenant


def check_write_size(items: int) -> None:
    if items > MAX_DATA_PER_WRITE:
        raise invalid(
            f"ERROR_CODE_MAX_DATA_PER_WRITE_EXCEEDED: {items} tuples and attributes in one "
            f"write is over the limit of {MAX_DATA_PER_WRITE}"
        )


def _obj(doc: Any, field: str) -> dict:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise invalid(f"{field}: expected an object")
    return doc


def _str(doc: dict, key: str, field: str) -> str:
    value = doc.get(key)
    if value is None:
        return ""
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
    items = _list(doc, key, "body", MAX_DATA_PER_WRITE)
    if len(items) < min_items:
        raise invalid(f"body.{key}: at least {min_items} item(s) required")
    return pa.unique(parse_tuple(t, f"{key}[{i}]") for i, t in enumerate(items))


def parse_attributes(doc: dict) -> list[pa.Attribute]:
    items = _list(doc, "attributes", "body", MAX_DATA_PER_WRITE)
    first: dict[tuple, pa.Attribute] = {}
    for i, a in enumerate(items):
        attr = parse_attribute(a, f"attributes[{i}]")
        # Permify keeps the first of repeated (entity, attribute) in one write and skips the
        # rest (internal/servers/data_server.go Write, attributesMap).
        first.setdefault((attr.entity_type, attr.entity_id, attr.name), attr)
    return list(first.values())


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


def stamp(created: dt.datetime) -> str:
    return created.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def tenant_body(t: tuple) -> dict:
    return {"id": t[0], "name": t[1], "created_at": stamp(t[2])}


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


# -- schema and names ------------------------------------------------------------------------
def schema_body(defs: dict) -> dict:
    """Permify's SchemaDefinition (proto field names) of parsed definitions
    (``protocol.permify_schema.parse``); permission rewrite trees are not rendered."""
    entities = {}
    for name, ent in defs["entities"].items():
        refs = dict.fromkeys(ent["relations"], "REFERENCE_RELATION")
        refs |= dict.fromkeys(ent["attributes"], "REFERENCE_ATTRIBUTE")
        refs |= dict.fromkeys(ent["permissions"], "REFERENCE_PERMISSION")
        entities[name] = {
            "name": name,
            "relations": {
                r: {
                    "name": r,
                    "relation_references": [{"type": t, "relation": rel} for t, rel in types],
                }
                for r, types in ent["relations"].items()
            },
            "permissions": {p: {"name": p} for p in ent["permissions"]},
            "attributes": {a: {"name": a, "type": t} for a, t in ent["attributes"].items()},
            "references": refs,
        }
    rules = {n: {"name": n, "arguments": dict(r["arguments"])} for n, r in defs["rules"].items()}
    references = dict.fromkeys(entities, "REFERENCE_ENTITY") | dict.fromkeys(
        rules, "REFERENCE_RULE"
    )
    return {"entity_definitions": entities, "rule_definitions": rules, "references": references}


def unrepresentable(changes: list[pa.Change]) -> str:
    """What in ``changes`` breaks Permify's name rules ("" if nothing): such changes come from
    the SpiceDB surface, whose names allow ``/``, digits and longer ids."""
    for c in changes:
        try:
            if c.tuple is not None:
                pa.check_tuple(c.tuple, pa.PERMIFY, "tuple")
            elif c.attribute is not None:
                pa.check_attribute(c.attribute, "attribute")
        except pa.AuthzInputError as exc:
            return str(exc)
    return ""
