"""Our ``base.v1`` protos against Permify's published ones: every message, enum and method this
service serves has Permify's names, field numbers, types and labels, so Permify's own clients
work unchanged. ``permify_fields.json`` is the published table (its source commit inside),
extracted with protoc from Permify's proto/base/v1 files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

from watch_service.compat.proto import permify_base_v1_pb2

pytestmark = pytest.mark.unit
PUBLISHED = json.loads((Path(__file__).parent / "permify_fields.json").read_text())
# Fields of Permify's schema rendering this service does not produce (rewrite trees and CEL).
OMITTED = {("base.v1.RuleDefinition", "expression"), ("base.v1.PermissionDefinition", "child")}


def _ours() -> tuple[dict, dict, dict]:
    fdp = descriptor_pb2.FileDescriptorProto()
    permify_base_v1_pb2.DESCRIPTOR.CopyToProto(fdp)
    msgs: dict = {}
    enums: dict = {}

    def walk(m: descriptor_pb2.DescriptorProto, name: str) -> None:
        fields = {}
        for f in m.field:
            oneof = m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else ""
            fields[f.name] = [
                f.number,
                F.Type.Name(f.type),
                f.type_name.lstrip("."),
                F.Label.Name(f.label),
                oneof,
            ]
        for nested in m.nested_type:
            if nested.options.map_entry:
                field = next(f for f in m.field if f.type_name.endswith("." + nested.name))
                kv = [x.type_name.lstrip(".") or F.Type.Name(x.type) for x in nested.field]
                fields[field.name][2] = f"map<{kv[0]},{kv[1]}>"
            else:
                walk(nested, f"{name}.{nested.name}")
        for e in m.enum_type:
            enums[f"{name}.{e.name}"] = {v.name: v.number for v in e.value}
        msgs[name] = fields

    for m in fdp.message_type:
        walk(m, f"{fdp.package}.{m.name}")
    for e in fdp.enum_type:
        enums[f"{fdp.package}.{e.name}"] = {v.name: v.number for v in e.value}
    services = {
        f"{fdp.package}.{s.name}": {
            m.name: [m.input_type.lstrip("."), m.output_type.lstrip("."), m.server_streaming]
            for m in s.method
        }
        for s in fdp.service
    }
    return msgs, enums, services


def test_every_served_message_matches_permify() -> None:
    msgs, _, _ = _ours()
    assert set(msgs) == set(PUBLISHED["messages"])
    for name, fields in msgs.items():
        published = PUBLISHED["messages"][name]
        assert fields == {f: v for f, v in published.items() if (name, f) not in OMITTED}, name


def test_enums_and_methods_match_permify() -> None:
    _, enums, services = _ours()
    assert enums == PUBLISHED["enums"]
    assert services == PUBLISHED["services"]
    assert services["base.v1.Watch"]["Watch"][2] is True  # server-streaming
    assert PUBLISHED["commit"] == "e00d0522e2e5d9ccadac42625a3d40a9ba905360"
