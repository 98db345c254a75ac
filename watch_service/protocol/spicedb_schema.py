"""The SpiceDB schema language, pure: the parsed form of a schema's definitions and the
parser (``parse_text``, syntax only). The checks SpiceDB makes on a schema write and on every
relationship written, and the canonical text, are ``protocol.spicedb_checks``.

In scope: ``definition`` blocks with ``relation`` lines (allowed subject types ``type``,
``type#relation``, ``type:*``) and ``permission`` lines, which are parsed and kept but never
evaluated (this is a change-stream service). Caveats and ``with`` traits are refused with a
message that says so; ``use expiration`` is accepted and has no effect.

The parsed form (``Schema.to_json``) is what ``authz_schemas.definitions`` stores: a list, so
declaration order survives jsonb.
"""

from __future__ import annotations

import dataclasses
import functools
import re

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

    @functools.cached_property
    def _by_name(self) -> dict[str, Relation | Permission]:
        return dict(reversed([(m.name, m) for m in self.members]))  # the first of a name wins

    def member(self, name: str) -> Relation | Permission | None:
        return self._by_name.get(name)


@dataclasses.dataclass(frozen=True)
class Schema:
    definitions: tuple[Definition, ...]

    @functools.cached_property
    def _by_name(self) -> dict[str, Definition]:
        return dict(reversed([(d.name, d) for d in self.definitions]))  # the first wins

    def get(self, name: str) -> Definition | None:
        return self._by_name.get(name)

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
    r"|(?P<sym>[{}()|#:*=+\-&;.,])|(?P<other>\S)",
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
            raise parse_error(line, pos - line_start + 1, f"unexpected {source[pos]!r}")
        kind = m.lastgroup or ""
        if kind in ("ident", "sym", "arrow", "nl", "other"):
            out.append(_Tok(kind, m.group(), line, pos - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + m.group().rfind("\n") + 1
        pos = m.end()
    out.append(_Tok("eof", "", line, pos - line_start + 1))
    return out


def parse_error(line: int, col: int, what: str) -> SchemaError:
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
            raise parse_error(t.line, t.col, f"expected {want}, found {got}")
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
                raise parse_error(t.line, t.col, f"expected definition, found {t.text!r}")
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
                raise parse_error(
                    t.line, t.col, f"expected relation or permission, found {t.text!r}"
                )
            if self.peek().text != "}":
                end = self.peek()
                if end.kind != "nl" and end.text != ";":
                    raise parse_error(
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
            raise parse_error(t.line, t.col, "expected an expression")
        return Permission(name, _format_expression(parts))


def _format_expression(parts: list[str]) -> str:
    out = ""
    for p in parts:
        if p in ("+", "-", "&"):
            out += f" {p} "
        else:
            out += p
    return out


def parse_text(source: str) -> Schema:
    """The definitions ``source`` declares, checked for syntax only (``spicedb_checks.parse``
    adds the checks SpiceDB makes on a schema write)."""
    return _Parser(source).schema()


def missing_member(name: str, definition: str) -> SchemaError:
    return SchemaError(
        FAILED_PRECONDITION,
        f"relation/permission `{name}` not found under definition `{definition}`",
        "ERROR_REASON_UNKNOWN_RELATION_OR_PERMISSION",
        {"definition_name": definition, "relation_or_permission_name": name},
    )
