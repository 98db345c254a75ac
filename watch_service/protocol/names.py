"""Name rules of the contract: topics and nodes (and the tenant pattern ``protocol.authz``
checks Permify tenant ids against)."""

from __future__ import annotations

import re

from watch_service.protocol.errors import InvalidRequest, NotFound

TOPIC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")
TENANT_RE = re.compile(r"[a-zA-Z0-9_\-@\.:+]{1,128}|\*")
NODE_RE = re.compile(r"[\x21-\x7e\u00a0-\U0010ffff]{1,128}")  # printable, no whitespace
_WS = re.compile(r"\s")
# What ``new_wid`` makes ("wid_" + URL-safe base64), with room to change its length.
WID_RE = re.compile(r"wid_[A-Za-z0-9_-]{1,64}")


def check_topic(name: object, field: str = "topic") -> str:
    if not isinstance(name, str) or not TOPIC_RE.fullmatch(name):
        raise InvalidRequest(
            f"{field}: {name!r} is not a valid topic name "
            f"(1-200 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit)"
        )
    return name


def check_node(node: object, field: str = "node") -> str:
    if (
        not isinstance(node, str)
        or not NODE_RE.fullmatch(node)
        or _WS.search(node)
        or not node.isprintable()
    ):
        raise InvalidRequest(
            f"{field}: must be 1-128 printable characters without whitespace, got {node!r}"
        )
    return node


def check_wid(wid: str) -> str:
    """``wid`` if it has the shape of a watch session id; else 404, before any lookup (a NUL
    or other byte PostgreSQL refuses in text must not reach the query)."""
    if not WID_RE.fullmatch(wid):
        raise NotFound(f"watch session {wid!r} is unknown or expired; POST /v0/watch again")
    return wid
