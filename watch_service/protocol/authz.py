"""Authorization data, pure: relationship tuples, attributes, filters, the change records a
write appends to its tenant's change topic, and the tokens naming a position in that topic.

Text forms: a tuple is ``entity:id#relation@subject:id[#relation]``, an attribute reference
``entity:id$name``. Types and relations never contain ``:#@$`` and ids never contain ``#$``,
so both parse back unambiguously even though ids may contain ``:`` and ``@``.

A Permify snap token and a SpiceDB ZedToken are the same thing here: an opaque, versioned
encoding of a seq in the tenant's change topic plus a fingerprint of that topic, meaning
"every change up to and including this seq". Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.names import TENANT_RE, TOPIC_RE

TOPIC_PREFIX = "authz."
DIGEST_PREFIX = "authz-sha256."
CHANGES_PER_RECORD = 1000
OPS = ("create", "touch", "delete")


class AuthzInputError(AuditsyncError, ValueError):
    """Input that breaks a rule; the message names the field and the rule."""


@dataclasses.dataclass(frozen=True, slots=True)
class Tuple:
    entity_type: str
    entity_id: str
    relation: str
    subject_type: str
    subject_id: str
    subject_relation: str = ""

    def key(self) -> tuple[str, ...]:
        return dataclasses.astuple(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Attribute:
    entity_type: str
    entity_id: str
    name: str
    value: Any  # the typed value as sent: {"@type": "type.googleapis.com/base.v1.…", "data": …}


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    op: str  # create | touch | delete
    tuple: Tuple | None = None
    attribute: Attribute | None = None


# -- text forms ------------------------------------------------------------------------------
_TUPLE_RE = re.compile(r"([^:#@$]+):([^#$]+)#([^:#@$]+)@([^:#@$]+):([^#$]+?)(?:#([^:#@$]+))?")
_ATTR_RE = re.compile(r"([^:#@$]+):([^#$]+)\$([^:#@$]+)")


def format_tuple(t: Tuple) -> str:
    tail = f"#{t.subject_relation}" if t.subject_relation else ""
    return f"{t.entity_type}:{t.entity_id}#{t.relation}@{t.subject_type}:{t.subject_id}{tail}"


def parse_tuple(text: str) -> Tuple:
    m = _TUPLE_RE.fullmatch(text)
    if m is None:
        raise AuthzInputError(f"tuple: {text!r} is not entity:id#relation@subject:id[#relation]")
    entity_type, entity_id, relation, subject_type, subject_id, subject_relation = m.groups("")
    return Tuple(entity_type, entity_id, relation, subject_type, subject_id, subject_relation)


def format_attribute_ref(a: Attribute) -> str:
    return f"{a.entity_type}:{a.entity_id}${a.name}"


def parse_attribute_ref(text: str) -> tuple[str, str, str]:
    m = _ATTR_RE.fullmatch(text)
    if m is None:
        raise AuthzInputError(f"attribute: {text!r} is not entity:id$name")
    return m.group(1), m.group(2), m.group(3)


# -- validation ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Dialect:
    """The name rules of one surface."""

    name: str
    type_re: re.Pattern
    id_re: re.Pattern
    relation_re: re.Pattern  # also attribute names


# Permify's published rules (proto/base/v1/base.proto Entity, Subject, Tuple): types and
# relations are letters and ``_`` only, as its schema lexer reads names.
PERMIFY = Dialect(
    "permify",
    re.compile(r"[a-zA-Z_]{1,64}"),
    re.compile(r"[a-zA-Z0-9_\-@.:+]{1,128}|\*"),
    re.compile(r"[a-zA-Z_]{1,64}"),
)
SPICEDB = Dialect(
    "spicedb",
    re.compile(r"(?:[a-z][a-z0-9_]{1,61}[a-z0-9]/)*[a-z][a-z0-9_]{1,62}[a-z0-9]"),
    re.compile(r"[a-zA-Z0-9/_|\-=+]{1,1024}|\*"),
    re.compile(r"[a-z][a-z0-9_]{1,62}[a-z0-9]"),
)


def _check(value: Any, rule: re.Pattern, field: str, max_len: int = 1024) -> str:
    if not isinstance(value, str) or len(value) > max_len or not rule.fullmatch(value):
        raise AuthzInputError(f"{field}: {value!r} does not match ^({rule.pattern})$")
    return value


def check_tuple(t: Tuple, d: Dialect, field: str = "tuple") -> Tuple:
    _check(t.entity_type, d.type_re, f"{field}.entity.type", 128)
    _check(t.entity_id, d.id_re, f"{field}.entity.id")
    _check(t.relation, d.relation_re, f"{field}.relation", 64)
    _check(t.subject_type, d.type_re, f"{field}.subject.type", 128)
    _check(t.subject_id, d.id_re, f"{field}.subject.id")
    if t.subject_relation:
        _check(t.subject_relation, d.relation_re, f"{field}.subject.relation", 64)
    if t.entity_id == "*":
        raise AuthzInputError(f"{field}.entity.id: '*' is allowed only as a subject id")
    return t


_VALUE_KINDS = {
    "BooleanValue": (bool,),
    "StringValue": (str,),
    "IntegerValue": (int,),
    "DoubleValue": (int, float),
}
VALUE_TYPE_PREFIX = "type.googleapis.com/base.v1."
INT32 = (-(2**31), 2**31 - 1)


def check_value(value: Any, field: str = "value") -> dict:
    """A Permify typed attribute value: ``{"@type": ".../base.v1.<Kind>[Array]Value",
    "data": …}`` with ``data`` of that kind."""
    if not isinstance(value, dict) or set(value) - {"@type", "data"}:
        raise AuthzInputError(f'{field}: expected {{"@type": ..., "data": ...}}')
    kind = value.get("@type")
    name = (
        kind[len(VALUE_TYPE_PREFIX) :]
        if isinstance(kind, str) and kind.startswith(VALUE_TYPE_PREFIX)
        else ""
    )
    is_array = name.endswith("ArrayValue")
    base = name.replace("ArrayValue", "Value") if is_array else name
    if base not in _VALUE_KINDS:
        allowed = ", ".join(VALUE_TYPE_PREFIX + k for k in _VALUE_KINDS)
        raise AuthzInputError(
            f"{field}.@type: {kind!r} is not one of {allowed} (or their Array forms)"
        )
    data = value.get("data")
    items = data if is_array else [data]
    if not isinstance(items, list) or not all(_is_kind(x, base) for x in items):
        raise AuthzInputError(f"{field}.data: {data!r} is not a valid {name}")
    return {"@type": kind, "data": data}


def _is_kind(x: Any, base: str) -> bool:
    if isinstance(x, bool) != (base == "BooleanValue"):
        return False
    if base == "IntegerValue":
        return isinstance(x, int) and INT32[0] <= x <= INT32[1]
    return isinstance(x, _VALUE_KINDS[base])


def check_attribute(a: Attribute, field: str = "attribute") -> Attribute:
    _check(a.entity_type, PERMIFY.type_re, f"{field}.entity.type", 64)
    _check(a.entity_id, PERMIFY.id_re, f"{field}.entity.id", 128)
    _check(a.name, PERMIFY.relation_re, f"{field}.attribute", 64)
    return dataclasses.replace(a, value=check_value(a.value, f"{field}.value"))


# Permify creates tenants whose ids match ``[a-zA-Z0-9-,]+`` (max 64 bytes, TenantCreateRequest)
# and takes ``tenant_id`` by TENANT_RE elsewhere; both are accepted, so a created tenant is usable.
TENANT_CREATE_RE = re.compile(r"[a-zA-Z0-9\-,]{1,64}")


def check_tenant(tenant: Any, field: str = "tenant_id") -> str:
    if not isinstance(tenant, str) or not (
        TENANT_RE.fullmatch(tenant) or TENANT_CREATE_RE.fullmatch(tenant)
    ):
        raise AuthzInputError(
            f"{field}: {tenant!r} does not match "
            r"^([a-zA-Z0-9_\-@\.:+]{1,128}|\*)$"
        )
    return tenant


# -- filters ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TupleFilter:
    """Empty/None fields match anything; ``subject_relation=""`` matches direct subjects."""

    entity_type: str | None = None
    entity_ids: tuple[str, ...] = ()
    entity_id_prefix: str | None = None
    relation: str | None = None
    subject_type: str | None = None
    subject_ids: tuple[str, ...] = ()
    subject_relation: str | None = None

    def is_empty(self) -> bool:
        return self == TupleFilter()


def matches(f: TupleFilter, t: Tuple) -> bool:
    return (
        (f.entity_type is None or t.entity_type == f.entity_type)
        and (not f.entity_ids or t.entity_id in f.entity_ids)
        and (f.entity_id_prefix is None or t.entity_id.startswith(f.entity_id_prefix))
        and (f.relation is None or t.relation == f.relation)
        and (f.subject_type is None or t.subject_type == f.subject_type)
        and (not f.subject_ids or t.subject_id in f.subject_ids)
        and (f.subject_relation is None or t.subject_relation == f.subject_relation)
    )


@dataclasses.dataclass(frozen=True)
class AttributeFilter:
    entity_type: str | None = None
    entity_ids: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


# -- change records ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SchemaChange:
    """A schema write: the new version of the tenant's schema in one dialect."""

    dialect: str  # permify | spicedb
    version: str


@dataclasses.dataclass(frozen=True)
class ChangeRecord:
    tenant: str
    source: str
    changes: list[Change]
    metadata: dict | None
    schema: SchemaChange | None = None  # set on a schema write's record (its changes are [])
    part: tuple[int, int] | None = None  # (i, n): record i of the n one transaction appended

    @property
    def ends_revision(self) -> bool:
        """The last (or only) record of its transaction."""
        return self.part is None or self.part[0] == self.part[1]


def _change_doc(c: Change) -> dict:
    if c.tuple is not None:
        return {"op": c.op, "tuple": format_tuple(c.tuple)}
    a = c.attribute
    assert a is not None
    return {"op": c.op, "attribute": format_attribute_ref(a), "value": a.value}


def change_records(
    tenant: str, source: str, changes: Sequence[Change], metadata: dict | None
) -> list[str]:
    """The JSON ``data`` of the record(s) one transaction appends: one record per
    CHANGES_PER_RECORD changes, each carrying the transaction metadata."""
    chunks = [
        changes[i : i + CHANGES_PER_RECORD] for i in range(0, len(changes), CHANGES_PER_RECORD)
    ]
    out = []
    for i, chunk in enumerate(chunks):
        doc: dict = {"tenant": tenant, "source": source, "changes": [_change_doc(c) for c in chunk]}
        if metadata is not None:
            doc["metadata"] = metadata
        if len(chunks) > 1:
            doc["part"] = [i + 1, len(chunks)]
        out.append(orjson.dumps(doc).decode())
    return out


def schema_record(tenant: str, source: str, change: SchemaChange) -> str:
    """The JSON ``data`` of the record a schema write appends: no data changes, the version."""
    schema = {"dialect": change.dialect, "version": change.version}
    doc = {"tenant": tenant, "source": source, "changes": [], "schema": schema}
    return orjson.dumps(doc).decode()


def parse_change_record(data: str | bytes) -> ChangeRecord:
    """Parse a change record's ``data``; AuthzInputError for anything else (a foreign write
    into a change topic)."""
    try:
        doc = orjson.loads(data)
        changes = []
        for c in doc["changes"]:
            if c["op"] not in OPS:
                raise ValueError(c["op"])
            if "tuple" in c:
                changes.append(Change(c["op"], tuple=parse_tuple(c["tuple"])))
            else:
                et, eid, name = parse_attribute_ref(c["attribute"])
                changes.append(Change(c["op"], attribute=Attribute(et, eid, name, c["value"])))
        schema = doc.get("schema")
        if schema is not None:
            schema = SchemaChange(str(schema["dialect"]), str(schema["version"]))
        part = doc.get("part")
        if part is not None:
            part = (int(part[0]), int(part[1]))
        return ChangeRecord(
            doc["tenant"], doc["source"], changes, doc.get("metadata"), schema, part
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise AuthzInputError(f"not a change record ({type(exc).__name__}: {exc})") from None


# -- topics and tokens -----------------------------------------------------------------------
def change_topic(tenant: str) -> str:
    """The tenant's change topic. Topic names have no ``+`` or ``,``: ``_`` escapes as ``__``,
    ``+`` as ``_p`` and ``,`` as ``_c`` (injective); names too long for a topic use a digest
    under another prefix."""
    encoded = TOPIC_PREFIX + tenant.replace("_", "__").replace("+", "_p").replace(",", "_c")
    if len(encoded) <= 200 and TOPIC_RE.fullmatch(encoded):
        return encoded
    return DIGEST_PREFIX + hashlib.sha256(tenant.encode()).hexdigest()


def _fingerprint(topic: str) -> str:
    return hashlib.sha256(topic.encode()).hexdigest()[:8]


class TokenFromEarlierTenant(AuthzInputError):
    """The token was issued before its tenant was deleted and created again: every change of
    the earlier tenant, its deletion included, is lost to the token's holder."""


def topic_epoch(created_at: Any) -> str:
    """The incarnation of a change topic: its creation time (a recreated tenant's topic is
    created again), as a short digest for tokens."""
    return hashlib.sha256(str(created_at.timestamp()).encode()).hexdigest()[:6]


def is_change_topic(name: str) -> bool:
    """Whether ``name`` is in the authorization engine's topic namespace (``change_topic``)."""
    return name.startswith((TOPIC_PREFIX, DIGEST_PREFIX))


def encode_token(topic: str, seq: int, epoch: str = "") -> str:
    """``epoch`` (``topic_epoch``) ties the token to this incarnation of the tenant."""
    raw = f"v1.{seq}.{_fingerprint(topic)}" + (f".{epoch}" if epoch else "")
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(topic: str, token: str, field: str = "token", epoch: str | None = None) -> int:
    """The seq of a token of ``topic``; with ``epoch``, a token carrying another incarnation's
    epoch raises TokenFromEarlierTenant (tokens without one predate epochs and pass)."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
        version, seq_text, fp, *rest = raw.split(".")
        seq = int(seq_text) if seq_text.isdigit() and len(rest) <= 1 else -1
    except (ValueError, binascii.Error, UnicodeDecodeError):
        version, seq, fp, rest = "", -1, "", []
    if version != "v1" or seq < 0:
        raise AuthzInputError(f"{field}: {token!r} is not a token issued by this service")
    if fp != _fingerprint(topic):
        raise AuthzInputError(f"{field}: {token!r} was issued for a different tenant")
    if epoch is not None and rest and rest[0] != epoch:
        raise TokenFromEarlierTenant(
            f"{field}: {token!r} was issued before this tenant was deleted and created again: "
            "the earlier tenant's data and every change since are lost to it. Re-read the "
            "current state (relationships and attributes), then watch without a token (from now)."
        )
    return seq


def unique(items: Iterable) -> list:
    """Items in first-seen order without repeats."""
    return list(dict.fromkeys(items))
