"""The checks SpiceDB makes, pure: on a schema write (names, duplicates, the types and
relations a schema refers to, definitions or relations dropped while still in use), on every
relationship written and every filter used, with SpiceDB's status codes, messages and
``ErrorInfo`` reasons; and the canonical schema text ReadSchema returns. The language itself
(model and parser) is ``protocol.spicedb_schema``.
"""

from __future__ import annotations

import re

from watch_service.protocol import authz as pa
from watch_service.protocol import spicedb_schema
from watch_service.protocol.spicedb_schema import (
    FAILED_PRECONDITION,
    INVALID_ARGUMENT,
    Definition,
    Permission,
    Relation,
    Schema,
    SchemaError,
)


# -- the checks WriteSchema makes --------------------------------------------------------------
def parse(source: str) -> Schema:
    """The schema ``source`` defines, after SpiceDB's write-time checks; raises SchemaError."""
    schema = spicedb_schema.parse_text(source)
    seen: set[str] = set()
    for d in schema.definitions:
        if d.name in seen:
            raise _at(
                d.at, f"found name reused between multiple definitions and/or caveats: {d.name}"
            )
        seen.add(d.name)
        if not _DEFINITION_NAME.fullmatch(d.name):
            raise _at(d.at, f"error in object definition {d.name}: {_name_rule(_DEFINITION_NAME)}")
        names: set[str] = set()
        for m in d.members:
            if not _MEMBER_NAME.fullmatch(m.name):
                kind = "relation" if isinstance(m, Relation) else "permission"
                raise _at(m.at, f"error in {kind} {m.name}: {_name_rule(_MEMBER_NAME)}")
            if m.name in names:
                raise SchemaError(
                    FAILED_PRECONDITION,
                    f"found duplicate relation/permission name `{m.name}` under definition "
                    f"`{d.name}`",
                    "ERROR_REASON_SCHEMA_TYPE_ERROR",
                    {"definition_name": d.name},
                )
            names.add(m.name)
    for d in schema.definitions:
        for m in d.members:
            if isinstance(m, Relation):
                for allowed in m.allowed:
                    _check_allowed(schema, d, m, allowed)
            else:
                for name in _identifiers(m.expression):
                    if d.member(name) is None:
                        raise spicedb_schema.missing_member(name, d.name)
    return schema


_DEFINITION_NAME = re.compile(r"([a-z][a-z0-9_]{1,62}[a-z0-9]/)*[a-z][a-z0-9_]{1,62}[a-z0-9]")
_MEMBER_NAME = re.compile(r"[a-z][a-z0-9_]{1,62}[a-z0-9]")


def _identifiers(expression: str) -> list[str]:
    """The names an expression uses on its own definition: each ``a`` and each ``a`` of an
    arrow ``a->b`` / ``a.any(b)`` (the ``b`` lives on the subject's definition)."""
    names = re.findall(r"(?<![>(.])\b([a-z_][a-z0-9_]*)\b", expression)
    return [n for n in names if n not in ("nil", "any", "all")]


def _name_rule(rule: re.Pattern) -> str:
    return f"validation error: name: does not match regex pattern `^{rule.pattern}$`"


def _at(at: tuple[int, int], message: str) -> SchemaError:
    return spicedb_schema.parse_error(at[0], at[1], message)


def _check_allowed(schema: Schema, d: Definition, r: Relation, allowed: str) -> None:
    type_name, _, sub = allowed.partition("#")
    type_name = type_name.removesuffix(":*")
    target = schema.get(type_name)
    if target is None:
        raise SchemaError(
            FAILED_PRECONDITION,
            f"could not lookup definition `{type_name}` for relation `{r.name}`: "
            f"object definition `{type_name}` not found",
            "ERROR_REASON_SCHEMA_TYPE_ERROR",
            {"definition_name": type_name},
        )
    if sub and target.member(sub) is None:
        raise spicedb_schema.missing_member(sub, type_name)


def canonical(schema: Schema) -> str:
    """The schema text ReadSchema returns: definitions by name, tab-indented members."""
    blocks = []
    for d in sorted(schema.definitions, key=lambda d: d.name):
        if not d.members:
            blocks.append(f"definition {d.name} {{}}")
            continue
        lines = [
            f"\trelation {m.name}: {' | '.join(m.allowed)}"
            if isinstance(m, Relation)
            else f"\tpermission {m.name} = {m.expression}"
            for m in d.members
        ]
        blocks.append(f"definition {d.name} {{\n" + "\n".join(lines) + "\n}")
    return "\n\n".join(blocks)


# -- validating writes -----------------------------------------------------------------------
def check_tuple(schema: Schema | None, t: pa.Tuple) -> None:
    """Raise SchemaError as SpiceDB does for a relationship its schema does not allow."""
    d = _definition(schema, t.entity_type)
    member = d.member(t.relation)
    if member is None:
        raise spicedb_schema.missing_member(t.relation, d.name)
    if isinstance(member, Permission):
        raise SchemaError(
            INVALID_ARGUMENT,
            f"cannot write a relationship to permission `{t.relation}` under definition `{d.name}`",
            "ERROR_REASON_CANNOT_UPDATE_PERMISSION",
            {"definition_name": d.name, "permission_name": t.relation},
        )
    subject = _definition(schema, t.subject_type)
    if t.subject_relation and subject.member(t.subject_relation) is None:
        raise spicedb_schema.missing_member(t.subject_relation, subject.name)
    if t.subject_id == "*":
        wanted = f"{t.subject_type}:*"
    elif t.subject_relation:
        wanted = f"{t.subject_type}#{t.subject_relation}"
    else:
        wanted = t.subject_type
    if wanted in member.allowed:
        return
    message = f"subjects of type `{wanted}` are not allowed on relation `{d.name}#{t.relation}`"
    hints = [a for a in member.allowed if a.startswith(t.subject_type + "#")]
    if wanted == t.subject_type and hints:
        message += f"; did you mean `{hints[0]}`?"
    raise SchemaError(
        INVALID_ARGUMENT,
        message,
        "ERROR_REASON_INVALID_SUBJECT_TYPE",
        {"definition_name": d.name, "relation_name": t.relation, "subject_type": wanted},
    )


def check_filter(schema: Schema | None, f: pa.TupleFilter) -> None:
    """Raise SchemaError as SpiceDB does for a filter naming an unknown type or relation."""
    if f.entity_type is not None:
        d = _definition(schema, f.entity_type)
        if f.relation is not None and d.member(f.relation) is None:
            raise spicedb_schema.missing_member(f.relation, d.name)
    if f.subject_type is not None:
        s = _definition(schema, f.subject_type)
        if f.subject_relation and s.member(f.subject_relation) is None:
            raise spicedb_schema.missing_member(f.subject_relation, s.name)


def _definition(schema: Schema | None, name: str) -> Definition:
    d = schema.get(name) if schema is not None else None
    if d is None:
        raise SchemaError(
            FAILED_PRECONDITION,
            f"object definition `{name}` not found",
            "ERROR_REASON_UNKNOWN_DEFINITION",
            {"definition_name": name},
        )
    return d


def removed(old: Schema | None, new: Schema) -> list[tuple[str, pa.TupleFilter]]:
    """What ``new`` drops from ``old`` that relationships may still use: (what, filter of those
    relationships), ``what`` worded as SpiceDB's refusal. A schema write must not drop one
    that still has relationships."""
    if old is None:
        return []
    out: list[tuple[str, pa.TupleFilter]] = []
    for d in old.definitions:
        nd = new.get(d.name)
        if nd is None:
            out.append((f"delete object definition `{d.name}`", pa.TupleFilter(entity_type=d.name)))
            continue
        for m in d.members:
            if not isinstance(m, Relation):
                continue
            kept = nd.member(m.name)
            if not isinstance(kept, Relation):
                out.append(
                    (
                        f"delete relation `{m.name}` in object definition `{d.name}`",
                        pa.TupleFilter(entity_type=d.name, relation=m.name),
                    )
                )
                continue
            for allowed in m.allowed:
                if allowed in kept.allowed:
                    continue
                type_name, _, sub = allowed.partition("#")
                wildcard = type_name.endswith(":*")
                out.append(
                    (
                        f"remove allowed type `{allowed}` from relation `{m.name}` in object "
                        f"definition `{d.name}`",
                        pa.TupleFilter(
                            entity_type=d.name,
                            relation=m.name,
                            subject_type=type_name.removesuffix(":*"),
                            subject_ids=("*",) if wildcard else (),
                            subject_relation=sub,
                        ),
                    )
                )
    return out
