"""Permify's schema language, pure: parse the definitions of a schema text the way Permify
does, with Permify's error codes (writes are checked against them by
``protocol.permify_validation``).

Parsed: ``entity NAME { … }`` with ``relation NAME @type @type#relation …``, ``attribute NAME
TYPE`` (boolean, string, integer, double and their ``[]`` forms) and ``permission``/``action
NAME = expression`` lines, plus top-level ``rule NAME(arg type, …) { expression }``. Expressions
are kept as text and their references checked (permissions are not evaluated here).
Identifiers are letters and ``_`` only, as Permify's lexer reads them
(Permify/permify pkg/dsl/lexer/lexer.go ``isLetter``).

Errors carry Permify's ``ErrorCode`` names (proto/base/v1/errors.proto); the gRPC status follows
from the code's range as in internal/servers/error.go ``GetStatus`` (1xxx UNAUTHENTICATED, 2xxx
INVALID_ARGUMENT, 4xxx NOT_FOUND, else INTERNAL).
"""

from __future__ import annotations

import re

from watch_service.protocol.errors import AuditsyncError

ATTRIBUTE_TYPES = {
    "boolean": "ATTRIBUTE_TYPE_BOOLEAN",
    "boolean[]": "ATTRIBUTE_TYPE_BOOLEAN_ARRAY",
    "string": "ATTRIBUTE_TYPE_STRING",
    "string[]": "ATTRIBUTE_TYPE_STRING_ARRAY",
    "integer": "ATTRIBUTE_TYPE_INTEGER",
    "integer[]": "ATTRIBUTE_TYPE_INTEGER_ARRAY",
    "double": "ATTRIBUTE_TYPE_DOUBLE",
    "double[]": "ATTRIBUTE_TYPE_DOUBLE_ARRAY",
}
# The value message each attribute type takes (pkg/attribute/attribute.go TypeToString).
VALUE_TYPES = {
    enum: "type.googleapis.com/base.v1."
    + name.rstrip("[]").capitalize()
    + ("ArrayValue" if name.endswith("[]") else "Value")
    for name, enum in ATTRIBUTE_TYPES.items()
}
ERROR_CODES = {
    "ERROR_CODE_ENTITY_AND_SUBJECT_CANNOT_BE_EQUAL": 2008,
    "ERROR_CODE_DUPLICATED_ENTITY_REFERENCE": 2012,
    "ERROR_CODE_DUPLICATED_RELATION_REFERENCE": 2013,
    "ERROR_CODE_DUPLICATED_PERMISSION_REFERENCE": 2014,
    "ERROR_CODE_SCHEMA_PARSE": 2015,
    "ERROR_CODE_SCHEMA_COMPILE": 2016,
    "ERROR_CODE_UNDEFINED_RELATION_REFERENCE": 2006,
    "ERROR_CODE_INVALID_ARGUMENT": 2025,
    "ERROR_CODE_INVALID_RULE_REFERENCE": 2026,
    "ERROR_CODE_MAX_DATA_PER_WRITE_EXCEEDED": 2030,
    "ERROR_CODE_SCHEMA_NOT_FOUND": 4003,
    "ERROR_CODE_SUBJECT_TYPE_NOT_FOUND": 4004,
    "ERROR_CODE_RELATION_DEFINITION_NOT_FOUND": 4007,
    "ERROR_CODE_TENANT_NOT_FOUND": 4009,
    "ERROR_CODE_ATTRIBUTE_DEFINITION_NOT_FOUND": 4010,
    "ERROR_CODE_ATTRIBUTE_TYPE_MISMATCH": 4011,
}


class SchemaError(AuditsyncError):
    """A Permify error: ``code`` is the ErrorCode name; the message starts with it."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code, self.message = code, f"{code}: {detail}"

    @property
    def grpc_code(self) -> int:
        """The gRPC status code Permify answers with (internal/servers/error.go)."""
        number = ERROR_CODES.get(self.code, 5000)
        return {1: 16, 2: 3, 4: 5}.get(number // 1000, 13)


# -- parsing ---------------------------------------------------------------------------------
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TOKEN = re.compile(
    r"(?P<ws>[ \t\r]+)|(?P<nl>\n)|(?P<comment>//[^\n]*|/\*.*?\*/)|(?P<ident>[A-Za-z_]+)"
    r"|(?P<num>\d+(?:\.\d+)?)|(?P<str>\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')"
    r"|(?P<op>\[\]|[{}()@#.,=\[\]!<>+\-*/%&|:?^~])",
    re.S,
)


Token = tuple[str, str, int, int, int]  # kind, text, line, column, offset


def _tokens(text: str) -> list[Token]:
    """Each token; newlines are tokens (they end members), blanks and comments are not."""
    out, pos, line, col0 = [], 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SchemaError(
                "ERROR_CODE_SCHEMA_PARSE", f"{line}:{pos - col0 + 1}: unexpected {text[pos]!r}"
            )
        kind = m.lastgroup or ""
        if kind not in ("ws", "comment") or "\n" in m.group():
            kind = "nl" if kind == "comment" else kind
            out.append((kind, m.group(), line, pos - col0 + 1, pos))
        for i, ch in enumerate(m.group()):
            if ch == "\n":
                line, col0 = line + 1, pos + i + 1
        pos = m.end()
    out.append(("eof", "", line, pos - col0 + 1, pos))
    return out


_KIND_NAMES = {"nl": "a line break", "ident": "a name (letters and _)"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.toks, self.i = text, _tokens(text), 0

    def peek(self) -> Token:
        return self.toks[self.i]

    def next(self) -> Token:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def skip_nl(self) -> None:
        while self.peek()[0] == "nl":
            self.i += 1

    def fail(self, expected: str) -> SchemaError:
        kind, text, line, col, _ = self.peek()
        got = "end of schema" if kind == "eof" else repr(text)
        return SchemaError(
            "ERROR_CODE_SCHEMA_PARSE", f"{line}:{col}: expected {expected}, got {got}"
        )

    def expect(self, kind: str, text: str | None = None) -> str:
        tok = self.peek()
        if tok[0] != kind or (text is not None and tok[1] != text):
            raise self.fail(repr(text) if text else _KIND_NAMES.get(kind, kind))
        self.i += 1
        return tok[1]

    def rest_of_line(self) -> str:
        """An expression: the source up to the end of the line, continuing while brackets are
        open, with its blanks and line breaks collapsed to single spaces."""
        first = last = self.peek()
        depth = 0
        while True:
            kind, text, *_ = self.peek()
            if kind == "eof" or (depth == 0 and (kind == "nl" or text == "}")):
                break
            self.i += 1
            depth += text in "({"
            depth -= text in ")}"
            last = self.toks[self.i - 1] if kind != "nl" else last
        if last is first and self.toks[self.i - 1] is not first:
            raise self.fail("an expression")
        source = self.text[first[4] : last[4] + len(last[1])]
        return " ".join(_COMMENTS.sub(" ", source).split())


def parse(text: str) -> dict:
    """The definitions of a Permify schema text, as plain JSON-able data:
    ``{"entities": {name: {"relations": {name: [[type, relation]]}, "attributes": {name: enum},
    "permissions": {name: {"kind", "expression"}}}}, "rules": {name: {"arguments", "body"}}}``.
    Raises SchemaError (Permify's parse and compile error codes)."""
    p = _Parser(text)
    entities: dict[str, dict] = {}
    rules: dict[str, dict] = {}
    p.skip_nl()
    while p.peek()[0] != "eof":
        word = p.expect("ident")
        name = p.expect("ident")
        if name in entities or name in rules:
            raise SchemaError(
                "ERROR_CODE_DUPLICATED_ENTITY_REFERENCE", f"{name!r} is defined twice"
            )
        if word == "entity":
            entities[name] = _entity(p, name)
        elif word == "rule":
            rules[name] = _rule(p)
        else:
            p.i -= 2
            raise p.fail("'entity' or 'rule'")
        p.skip_nl()
    if not entities:
        raise SchemaError("ERROR_CODE_SCHEMA_PARSE", "a schema needs at least one entity")
    defs = {"entities": entities, "rules": rules}
    _compile(defs)
    return defs


def _entity(p: _Parser, entity: str) -> dict:
    ent: dict[str, dict] = {"relations": {}, "attributes": {}, "permissions": {}}
    p.expect("op", "{")
    p.skip_nl()
    while p.peek()[1] != "}":
        kind = p.expect("ident")
        name = p.expect("ident")
        if any(name in members for members in ent.values()):
            code = "PERMISSION" if kind in ("permission", "action") else "RELATION"
            raise SchemaError(
                f"ERROR_CODE_DUPLICATED_{code}_REFERENCE", f"{entity}#{name} is defined twice"
            )
        if kind == "relation":
            refs = []
            while p.peek()[1] == "@":
                p.next()
                ref = [p.expect("ident"), ""]
                if p.peek()[1] == "#":
                    p.next()
                    ref[1] = p.expect("ident")
                refs.append(ref)
            if not refs:
                raise p.fail("'@type' after relation " + name)
            ent["relations"][name] = refs
        elif kind == "attribute":
            typ = p.expect("ident") + ("[]" if p.peek()[1] == "[]" else "")
            p.i += typ.endswith("[]")
            if typ not in ATTRIBUTE_TYPES:
                raise SchemaError(
                    "ERROR_CODE_INVALID_ARGUMENT",
                    f"{entity}${name}: unknown attribute type {typ!r}",
                )
            ent["attributes"][name] = ATTRIBUTE_TYPES[typ]
        elif kind in ("permission", "action"):
            p.expect("op", "=")
            ent["permissions"][name] = {"kind": kind, "expression": p.rest_of_line()}
        else:
            p.i -= 2
            raise p.fail("'relation', 'attribute', 'permission' or 'action'")
        if p.peek()[1] != "}":
            p.expect("nl")
        p.skip_nl()
    p.expect("op", "}")
    return ent


def _rule(p: _Parser) -> dict:
    args: dict[str, str] = {}
    p.expect("op", "(")
    while p.peek()[1] != ")":
        arg = p.expect("ident")
        typ = p.expect("ident") + ("[]" if p.peek()[1] == "[]" else "")
        p.i += typ.endswith("[]")
        if typ not in ATTRIBUTE_TYPES:
            raise SchemaError("ERROR_CODE_INVALID_ARGUMENT", f"rule argument {arg}: type {typ!r}")
        args[arg] = ATTRIBUTE_TYPES[typ]
        if p.peek()[1] == ",":
            p.next()
    p.expect("op", ")")
    p.expect("op", "{")
    p.skip_nl()
    body = p.rest_of_line()
    p.skip_nl()
    p.expect("op", "}")
    return {"arguments": args, "body": body}


_REF = re.compile(r"(?<![\w.\"'])([A-Za-z_]+)(?:\.([A-Za-z_]+))?(\()?")
_KEYWORDS = {"or", "and", "not", "true", "false", "request", "context"}


def _compile(defs: dict) -> None:
    """Permify's compile-time reference checks (pkg/dsl/compiler/compiler.go)."""
    entities, rules = defs["entities"], defs["rules"]
    for ename, ent in entities.items():
        for rname, refs in ent["relations"].items():
            for typ, rel in refs:
                target = entities.get(typ)
                if target is None or (
                    rel and rel not in target["relations"] and rel not in target["permissions"]
                ):
                    ref = f"{typ}#{rel}" if rel else typ
                    raise SchemaError(
                        "ERROR_CODE_UNDEFINED_RELATION_REFERENCE",
                        f"{ename}#{rname}: @{ref} is not defined",
                    )
        names = {**ent["relations"], **ent["attributes"], **ent["permissions"]}
        for pname, perm in ent["permissions"].items():
            for first, second, call in _REF.findall(perm["expression"]):
                if call:
                    if first not in rules:
                        raise SchemaError(
                            "ERROR_CODE_INVALID_RULE_REFERENCE",
                            f"{ename}#{pname}: rule {first!r} is not defined",
                        )
                elif first not in _KEYWORDS and first not in names:
                    raise SchemaError(
                        "ERROR_CODE_UNDEFINED_RELATION_REFERENCE",
                        f"{ename}#{pname}: {first!r} is not defined on entity {ename!r}",
                    )
                elif (
                    second
                    and first in ent["relations"]
                    and not any(
                        second in entities[t]["relations"] or second in entities[t]["permissions"]
                        for t, _ in ent["relations"][first]
                    )
                ):
                    raise SchemaError(
                        "ERROR_CODE_UNDEFINED_RELATION_REFERENCE",
                        f"{ename}#{pname}: {first}.{second} is not defined",
                    )
