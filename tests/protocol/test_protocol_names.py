"""Unit tests for the name rules of the contract (topics, nodes, and the Permify tenant rule
of ``protocol.authz``)."""

from __future__ import annotations

import pytest

from watch_service.protocol.authz import AuthzInputError, check_tenant
from watch_service.protocol.errors import ApiError
from watch_service.protocol.names import check_node, check_topic

pytestmark = pytest.mark.unit

TOPIC_RULE = "(1-200 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit)"


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "Z",
        "0",
        "orders",
        "tenant-1.audit:eu@v2_x",
        "9-",
        "a" * 200,
        "a.b..c",
        "A:_@-.",
    ],
)
def test_valid_topic_names(name):
    assert check_topic(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "-a",
        ".a",
        "_a",
        ":a",
        "@a",
        "a b",
        " a",
        "a ",
        "a" * 201,
        "café",
        "a/b",
        "a\nb",
        "a\x00",
        "tópico",
        "a#b",
        "a?b",
        "a%20b",
        "ａ",  # fullwidth letter
    ],
)
def test_invalid_topic_names(name):
    with pytest.raises(ApiError) as info:
        check_topic(name)
    err = info.value
    assert (err.status, err.code) == (400, "invalid_request")
    assert err.message == f"topic: {name!r} is not a valid topic name {TOPIC_RULE}"


@pytest.mark.parametrize("value", [None, 5, ["a"], {"a": 1}, b"abc"])
def test_topic_name_must_be_a_string(value):
    with pytest.raises(ApiError) as info:
        check_topic(value, field="topics[0]")
    assert info.value.message == f"topics[0]: {value!r} is not a valid topic name {TOPIC_RULE}"


@pytest.mark.parametrize("node", ["n", "node-1", "a" * 128, "é", "日本", "x!~", "中-1"])
def test_valid_nodes(node):
    assert check_node(node) == node


@pytest.mark.parametrize(
    "node",
    [
        "",
        "a b",
        " a",
        "a\t",
        "a\n",
        "a" * 129,
        "\u00a0",
        "a\u2003b",
        "a\x7f",
        "a\x00",
        "\u200b",
        None,
        1,
        ["a"],
    ],
)
def test_invalid_nodes(node):
    with pytest.raises(ApiError) as info:
        check_node(node, "records[2].node")
    assert info.value.code == "invalid_request"
    assert info.value.message == (
        f"records[2].node: must be 1-128 printable characters without whitespace, got {node!r}"
    )


@pytest.mark.parametrize("tenant", ["t1", "*", "a_b-c@d.e:f+g", "x" * 128])
def test_valid_tenants(tenant):
    assert check_tenant(tenant) == tenant


@pytest.mark.parametrize("tenant", ["", "**", "a b", "x" * 129, "t/1", "é", None])
def test_invalid_tenants(tenant):
    with pytest.raises(AuthzInputError) as info:
        check_tenant(tenant)
    assert str(info.value) == (
        f"tenant_id: {tenant!r} does not match ^([a-zA-Z0-9_\\-@\\.:+]{{1,128}}|\\*)$"
    )
