"""Validation of ``POST /v0/watch`` bodies into a normalised, storable definition."""

from __future__ import annotations

import dataclasses
from typing import Any

from watch_service.protocol.errors import InvalidRequest
from watch_service.protocol.names import check_node, check_topic
from watch_service.protocol.requests import INT63, _object, check_int, parse_json, type_name

MAX_TOPICS = 256
DEFAULT_LIMIT = 256
MAX_LIMIT = 10_000
DEFAULT_BATCH_BYTES = 262_144
ZERO_BATCH_BYTES = 1024 * 1024
MAX_BATCH_BYTES = 8 * 1024 * 1024
DEFAULT_HEARTBEAT_MS = 15_000
HEARTBEAT_RANGE = (1_000, 60_000)
U32 = 2**32 - 1

_FIELDS = {
    "node",
    "topics",
    "limit",
    "max_batch_bytes",
    "heartbeat_ms",
    "include_meta",
    "include_tags",
    "include_data",
    "consistency",
}


@dataclasses.dataclass(frozen=True)
class TopicStart:
    from_seq: int
    tail: bool


@dataclasses.dataclass(frozen=True)
class WatchDefinition:
    topics: dict[str, TopicStart]
    node: str | None = None
    limit: int = DEFAULT_LIMIT
    max_batch_bytes: int = DEFAULT_BATCH_BYTES
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    include_meta: bool = True
    include_tags: bool = False
    include_data: bool = True
    consistency: str = "eventual"

    def __post_init__(self) -> None:
        # Frames without data carry only $seq/$ts/$tag/$node (spec: no meta either), whatever
        # include_meta says; normalised here so every encoder and cache key sees one rule.
        if not self.include_data and self.include_meta:
            object.__setattr__(self, "include_meta", False)

    def to_json(self) -> dict:
        doc = dataclasses.asdict(self)
        doc["topics"] = {t: dataclasses.asdict(s) for t, s in self.topics.items()}
        # jsonb keeps no key order; the session's topic order (that of cursor ids) is kept here.
        doc["topic_order"] = list(self.topics)
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> WatchDefinition:
        doc = dict(doc)
        order = doc.pop("topic_order", None) or list(doc["topics"])
        topics = {t: TopicStart(**doc["topics"][t]) for t in order}
        return cls(**{**doc, "topics": topics})

    @property
    def flags(self) -> tuple[bool, bool, bool]:
        return (self.include_meta, self.include_tags, self.include_data)


def _bool(doc: dict, field: str, default: bool) -> bool:
    value = doc.get(field, default)
    if not isinstance(value, bool):
        raise InvalidRequest(f"{field}: expected a boolean, got {type_name(value)}")
    return value


def watch_definition(body: bytes) -> WatchDefinition:
    doc = _object(parse_json(body), "body", _FIELDS)
    topics_doc = doc.get("topics")
    if not isinstance(topics_doc, dict):
        raise InvalidRequest(
            f"topics: expected an object of topic -> options, got {type_name(topics_doc)}"
        )
    if not topics_doc:
        raise InvalidRequest("topics: at least one topic is required")
    if len(topics_doc) > MAX_TOPICS:
        raise InvalidRequest(f"topics: more than {MAX_TOPICS} topics (got {len(topics_doc)})")
    topics = {}
    for name, opts in topics_doc.items():
        check_topic(name, "topics key")
        opts = _object(opts, f"topics[{name!r}]", {"from_seq", "tail"})
        from_seq = check_int(opts.get("from_seq", 0), f"topics[{name!r}].from_seq", 0, INT63)
        topics[name] = TopicStart(from_seq, _bool(opts, "tail", False) if "tail" in opts else False)
    node = doc.get("node")
    if node is not None:
        check_node(node)
    limit = check_int(doc.get("limit", DEFAULT_LIMIT), "limit", 1, U32)
    batch = check_int(doc.get("max_batch_bytes", DEFAULT_BATCH_BYTES), "max_batch_bytes", 0, INT63)
    heartbeat = check_int(doc.get("heartbeat_ms", DEFAULT_HEARTBEAT_MS), "heartbeat_ms", 0, INT63)
    consistency: Any = doc.get("consistency", "eventual")
    if consistency not in ("eventual", "strong"):
        raise InvalidRequest(f'consistency: expected "eventual" or "strong", got {consistency!r}')
    return WatchDefinition(
        topics=topics,
        node=node,
        limit=min(limit, MAX_LIMIT),
        max_batch_bytes=ZERO_BATCH_BYTES if batch == 0 else min(batch, MAX_BATCH_BYTES),
        heartbeat_ms=min(max(heartbeat, HEARTBEAT_RANGE[0]), HEARTBEAT_RANGE[1]),
        include_meta=_bool(doc, "include_meta", True),
        include_tags=_bool(doc, "include_tags", False),
        include_data=_bool(doc, "include_data", True),
        consistency=consistency,
    )
