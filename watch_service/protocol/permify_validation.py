"""Writes checked against parsed Permify schema definitions (``protocol.permify_schema``) as
Permify's data server checks them: internal/validation/validation.go ``ValidateTuple`` and
``ValidateAttribute`` with pkg/tuple ``ValidateSubjectType``, raising Permify's error codes.
"""

from __future__ import annotations

from typing import Any

from watch_service.protocol.permify_schema import VALUE_TYPES, SchemaError

_ELLIPSIS = "..."  # Permify's "no subject relation" (pkg/tuple ELLIPSIS)


def _entity_def(defs: dict, entity_type: str) -> dict:
    ent = defs["entities"].get(entity_type)
    if ent is None:  # Permify reads one definition row per entity name: none is SCHEMA_NOT_FOUND
        raise SchemaError(
            "ERROR_CODE_SCHEMA_NOT_FOUND", f"entity {entity_type!r} is not in the schema"
        )
    return ent


def validate_tuple(defs: dict, t: Any) -> None:
    """Permify's internal/validation ValidateTuple: ``t`` is a ``protocol.authz.Tuple``."""
    subject_relation = "" if t.subject_relation == _ELLIPSIS else t.subject_relation
    if (t.entity_type, t.entity_id, t.relation) == (t.subject_type, t.subject_id, subject_relation):
        raise SchemaError(
            "ERROR_CODE_ENTITY_AND_SUBJECT_CANNOT_BE_EQUAL", "a tuple cannot relate to itself"
        )
    refs = _entity_def(defs, t.entity_type)["relations"].get(t.relation)
    if refs is None:
        raise SchemaError(
            "ERROR_CODE_RELATION_DEFINITION_NOT_FOUND",
            f"{t.entity_type}#{t.relation} is not a relation in the schema",
        )
    allowed = [f"{typ}#{rel}" if rel else typ for typ, rel in refs]
    key = f"{t.subject_type}#{subject_relation}" if subject_relation else t.subject_type
    if key not in allowed:
        raise SchemaError(
            "ERROR_CODE_SUBJECT_TYPE_NOT_FOUND",
            f"{t.entity_type}#{t.relation} does not allow subject {key} (allowed: "
            + ", ".join("@" + a for a in allowed)
            + ")",
        )


def validate_attribute(defs: dict, a: Any) -> None:
    """Permify's ValidateAttribute: ``a`` is a ``protocol.authz.Attribute`` (value checked)."""
    typ = _entity_def(defs, a.entity_type)["attributes"].get(a.name)
    if typ is None:
        raise SchemaError(
            "ERROR_CODE_ATTRIBUTE_DEFINITION_NOT_FOUND",
            f"{a.entity_type}${a.name} is not an attribute in the schema",
        )
    if a.value.get("@type") != VALUE_TYPES[typ]:
        raise SchemaError(
            "ERROR_CODE_ATTRIBUTE_TYPE_MISMATCH",
            f"{a.entity_type}${a.name} is {typ}; the value is {a.value.get('@type')}",
        )
