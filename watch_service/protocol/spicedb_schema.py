"""The SpiceDB schema language, pure: parsing a schema's definitions, the checks SpiceDB makes
when a schema is written, its canonical text (what ReadSchema returns), and the validation of
one relationship against a schema, with SpiceDB's status codes and messages.

In scope: ``definition`` blocks with ``relation`` lines (allowed subject types ``type``,
``type#relation``, ``type:*``) and ``permission`` lines, which are parsed, checked to name
known relations, and kept but never evaluated (this is a change-stream service). Caveats,
``with`` traits and ``use`` flags are refused with a message that says so.

The parsed form (``Schema.to_json``) is what ``authz_schemas.definitions`` stores: a list, so
declaration order survives jsonb.
"""

from __future__ import annotations

import dataclasses
import re

from watch_service.protocol import authz as pa
from watch_service.protocol.errors import AuditsyncError

# gRPC status names, kept as strings so this module stays free of grpc
INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND = (
    "INVALID_ARGUMENT",
    "FAILED_PRECONDITION",
    "NOT_FOUND",
)
_KEYWORDS = ("definition", "caveat", "relation", "permission", "nil", "use", "with")
NO_SCHEMA = "no schema has been defined; please call WriteSchema to start"


class SchemaError(AuditsyncError):
    """A schema or a write SpiceDB would refuse: ``code`` is the gRPC status name, ``reason``
    and ``metadata`` the ``ErrorInfo`` SpiceDB attaches (its ``ErrorReason`` name)."""

    def __init__(
        self, code: str, message: str, reason: str = "", metadata: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.reason, self.metadata = reason, metadata or {}


@dataclasses.dataclass(frozen=True)
class Relation:
    name: str
    allowed: tuple[str, ...]  # "user", "group#member", "user:*"
    at: tuple[int, int] = dataclasses.field(default=(0, 0), compare=False)  # line, column


@dataclasses.dataclass(frozen=True)
class Permission:
    name: str
    expression: str  # canonical text, never evaluated
    at: tuple[int, int] = dataclasses.field(default=(0, 0), compare=False)


@dataclasses.dataclass(frozen=True)
class Definition:
    name: str
    members: tuple[Relation | Permission, ...]
    at: tuple[int, int] = dataclasses.field(default=(0, 0), compare=False)

    def member(self, name: str) -> Relation | Permission | None:
        return next((m for m in self.members if m.name == name), None)


@dataclasses.dataclass(frozen=True)
class Schema:
    definitions: tuple[Definition, ...]

    def get(self, name: str) -> Definition | None:
        return next((d for d in self.definitions if d.name == name), None)

    def to_json(self) -> list[dict]:
        return [
            {
                "name": d.name,
                "members": [
                    {"relation": m.name, "allowed": list(m.allowed)}
                    if isinstance(m, Relation)
                    else {"permission": m.name, "expression": m.expression}
                    for m in d.members
                ],
            }
            for d in self.definitions
        ]

    @classmethod
    def from_json(cls, doc: list[dict]) -> Schema:
        return cls(
            tuple(
                Definition(
                    d["name"],
                    tuple(
                        Relation(m["relation"], tuple(m["allowed"]))
                        if "relation" in m
                        else Permission(m["permission"], m["expression"])
                        for m in d["members"]
                    ),
                )
                for d in doc
            )
        )


# -- tokens ----------------------------------------------------------------------------------
_TOKEN_RE = re.compile(
    r"(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<nl>\n)|(?P<ws>[ \t\r]+)"
    r"|(?P<arrow>->)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z_][A-Za-z0-9_]*)*)"
    r"|(?P<sym>[{}()|#:*=+\-&;.,])",
    re.S,
)


@dataclasses.dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    line: int
    col: int


def _tokens(source: str) -> list[_Tok]:
    out, pos, line, line_start = [], 0, 1, 0
    while pos < len(source):
        m = _TOKEN_RE.match(source, pos)
        if m is None:
            raise _parse_error(line, pos - line_start + 1, f"unexpected {source[pos]!r}")
        kind = m.lastgroup or ""
        if kind in ("ident", "sym", "arrow", "nl"):
            out.append(_Tok(kind, m.group(), line, pos - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + m.group().rfind("\n") + 1
        pos = m.end()
    out.append(_Tok("eof", "", line, pos - line_start + 1))
    return out


def _parse_error(line: int, col: int, what: str) -> SchemaError:
    return SchemaError(
        INVALID_ARGUMENT,
        f"parse error in `schema`, line {line}, column {col}: {what}",
        "ERROR_REASON_SCHEMA_PARSE_ERROR",
        {"start_line_number": str(line), "start_column_position": str(col)},
    )


class _Parser:
    def __init__(self, source: str) -> None:
        self.toks = _tokens(source)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self, text: str | None = None, kind: str | None = None) -> _Tok:
        t = self.peek()
        if (text is not None and t.text != text) or (kind is not None and t.kind != kind):
            want = repr(text) if text is not None else kind
            got = repr(t.text) if t.kind != "eof" else "end of schema"
            raise _parse_error(t.line, t.col, f"expected {want}, found {got}")
        self.i += 1
        return t

    def skip_breaks(self) -> None:
        while self.peek().kind == "nl" or self.peek().text == ";":
            self.i += 1

    def schema(self) -> Schema:
        defs = []
        self.skip_breaks()
        while self.peek().kind != "eof":
            t = self.peek()
            if t.text == "definition":
                defs.append(self.definition())
            elif t.text == "use" and self.toks[self.i + 1].text == "expiration":
                self.i += 2  # a flag for `with expiration`, which is refused where used
            elif t.text in ("caveat", "use", "partial"):
                raise SchemaError(
                    INVALID_ARGUMENT,
                    f"line {t.line}, column {t.col}: `{t.text}` is not supported by this "
                    "server (a change-stream service: definitions, relations and permissions "
                    "only)",
                )
            else:
                raise _parse_error(t.line, t.col, f"expected definition, found {t.text!r}")
            self.skip_breaks()
        return Schema(tuple(defs))

    def definition(self) -> Definition:
        start = self.take("definition")
        name = self.take(kind="ident").text
        self.take("{")
        members: list[Relation | Permission] = []
        self.skip_breaks()
        while self.peek().text != "}":
            t = self.take(kind="ident")
            if t.text == "relation":
                members.append(dataclasses.replace(self.relation(), at=(t.line, t.col)))
            elif t.text == "permission":
                members.append(dataclasses.replace(self.permission(), at=(t.line, t.col)))
            else:
                raise _parse_error(
                    t.line, t.col, f"expected relation or permission, found {t.text!r}"
                )
            if self.peek().text != "}":
                end = self.peek()
                if end.kind != "nl" and end.text != ";":
                    raise _parse_error(
                        end.line,
                        end.col,
                        "Expected end of statement or definition, found: "
                        + ("TokenTypeKeyword" if end.text in _KEYWORDS else repr(end.text)),
                    )
            self.skip_breaks()
        self.take("}")
        return Definition(name, tuple(members), (start.line, start.col))

    def relation(self) -> Relation:
        name = self.take(kind="ident").text
        self.take(":")
        allowed = [self.subject_type()]
        while self.peek().text == "|":
            self.take("|")
            allowed.append(self.subject_type())
        return Relation(name, tuple(allowed))

    def subject_type(self) -> str:
        name = self.take(kind="ident").text
        if self.peek().text == "#":
            self.take("#")
            return f"{name}#{self.take(kind='ident').text}"
        if self.peek().text == ":":
            self.take(":")
            self.take("*")
            return f"{name}:*"
        if self.peek().text == "with":
            t = self.peek()
            raise SchemaError(
                INVALID_ARGUMENT,
                f"line {t.line}, column {t.col}: caveats and expiration (`with`) are not "
                "supported by this server",
            )
        return name

    def permission(self) -> Permission:
        name = self.take(kind="ident").text
        self.take("=")
        parts: list[str] = []
        depth = 0
        while True:
            t = self.peek()
            ends = t.kind == "eof" or (t.text in (";", "}") and depth == 0)
            continues = parts and parts[-1] in ("+", "-", "&", "->", "(", ".")
            if ends or (t.kind == "nl" and depth == 0 and not continues):
                break
            self.i += 1
            if t.kind == "nl":
                continue
            depth += {"(": 1, ")": -1}.get(t.text, 0)
            parts.append(t.text)
        if not parts:
            t = self.peek()
            raise _parse_error(t.line, t.col, "expected an expression")
        return Permission(name, _format_expression(parts))


def _format_expression(parts: list[str]) -> str:
    out = ""
    for p in parts:
        if p in ("+", "-", "&"):
            out += f" {p} "
        else:
            out += p
    return out


def _identifiers(expression: str) -> list[str]:
    """The names an expression uses on its own definition: each ``a`` and each ``a`` of an
    arrow ``a->b`` / ``a.any(b)`` (the ``b`` lives on the subject's definition)."""
    names = re.findall(r"(?<![>(.])\b([a-z_][a-z0-9_]*)\b", expression)
    return [n for n in names if n not in ("nil", "any", "all")]


# -- the checks WriteSchema makes --------------------------------------------------------------
def parse(source: str) -> Schema:
    """The schema ``source`` defines, after SpiceDB's write-time checks; raises SchemaError."""
    schema = _Parser(source).schema()
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
                        raise _missing_member(name, d.name)
    return schema


_DEFINITION_NAME = re.compile(r"([a-z][a-z0-9_]{1,62}[a-z0-9]/)*[a-z][a-z0-9_]{1,62}[a-z0-9]")
_MEMBER_NAME = re.compile(r"[a-z][a-z0-9_]{1,62}[a-z0-9]")


def _name_rule(rule: re.Pattern) -> str:
    return f"validation error: name: does not match regex pattern `^{rule.pattern}$`"


def _at(at: tuple[int, int], message: str) -> SchemaError:
    return _parse_error(at[0], at[1], message)


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
        raise _missing_member(sub, type_name)


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
        raise _missing_member(t.relation, d.name)
    if isinstance(member, Permission):
        raise SchemaError(
            INVALID_ARGUMENT,
            f"cannot write a relationship to permission `{t.relation}` under definition `{d.name}`",
            "ERROR_REASON_CANNOT_UPDATE_PERMISSION",
            {"definition_name": d.name, "permission_name": t.relation},
        )
    subject = _definition(schema, t.subject_type)
    if t.subject_relation and subject.member(t.subject_relation) is None:
        raise _missing_member(t.subject_relation, subject.name)
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
            raise _missing_member(f.relation, d.name)
    if f.subject_type is not None:
        s = _definition(schema, f.subject_type)
        if f.subject_relation and s.member(f.subject_relation) is None:
            raise _missing_member(f.subject_relation, s.name)


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


def _missing_member(name: str, definition: str) -> SchemaError:
    return SchemaError(
        FAILED_PRECONDITION,
        f"relation/permission `{name}` not found under definition `{definition}`",
        "ERROR_REASON_UNKNOWN_RELATION_OR_PERMISSION",
        {"definition_name": definition, "relation_or_permission_name": name},
    )


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
