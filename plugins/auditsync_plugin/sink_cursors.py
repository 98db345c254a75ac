"""Has every sink received everything written before the data interval ended?

A sink persists its resume cursor per topic in ``<landing>/<consumer>/state.json`` (after the
segment holding those frames is durable). The service reports each topic's ``head_seq``. Once
the interval is over, a head read *now* covers every record committed before the interval's
end (seqs are commit-ordered, invariant L1), so a consumer whose cursor has reached the heads
read at or after the interval's end has passed the interval's end. Heads read later are only
larger, so using a later read is never wrong, only stricter.

:func:`decide` is the pure decision; :func:`read_positions` the only read of the landing zone
(a local folder or an ``s3://`` prefix, through ``watch_service.storage``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

from watch_service.protocol.landing import STATE_FILE
from watch_service.storage import Storage


@dataclasses.dataclass(frozen=True)
class SinkPosition:
    consumer: str
    topics: tuple[str, ...]
    cursors: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class Lag:
    consumer: str
    topic: str
    cursor: int
    head: int

    def __str__(self) -> str:
        return (
            f"{self.consumer}/{self.topic} cursor {self.cursor} < head {self.head} "
            f"({self.head - self.cursor} behind)"
        )


@dataclasses.dataclass(frozen=True)
class Decision:
    ready: bool
    reason: str
    lags: tuple[Lag, ...] = ()


def decide(
    now_s: float,
    interval_end_s: float,
    positions: Iterable[SinkPosition],
    missing: Iterable[str],
    heads: Mapping[str, int] | None,
) -> Decision:
    """Ready when the interval is over and every consumer's cursor ≥ the topic's head.

    ``missing``: consumers that were asked for but have no readable state yet.
    ``heads``: None when the service has not been asked (the interval is not over).
    Topics the service no longer lists (deleted) have nothing left to wait for.
    """
    if now_s < interval_end_s:
        return Decision(False, f"the data interval ends in {interval_end_s - now_s:.0f}s")
    missing = sorted(missing)
    if missing:
        return Decision(False, "no sink state yet for consumer(s) " + ", ".join(missing))
    positions = sorted(positions, key=lambda p: p.consumer)
    if not positions:
        return Decision(False, "no sink consumer has written a state.json in the landing zone")
    if heads is None:
        return Decision(False, "the service's topic heads are not known yet")
    lags = []
    for pos in positions:
        for topic in pos.topics or tuple(sorted(pos.cursors)):
            head = heads.get(topic)
            cursor = int(pos.cursors.get(topic, 0))
            if head is not None and cursor < head:
                lags.append(Lag(pos.consumer, topic, cursor, head))
    if lags:
        return Decision(
            False,
            "sink cursors behind the service heads: " + "; ".join(str(lag) for lag in lags),
            tuple(lags),
        )
    names = ", ".join(p.consumer for p in positions)
    return Decision(True, f"every sink ({names}) has reached the heads read after the interval")


def parse_state(consumer: str, raw: bytes | str) -> SinkPosition:
    doc = json.loads(raw)
    cursors = {str(t): int(c) for t, c in (doc.get("cursors") or {}).items()}
    return SinkPosition(consumer, tuple(doc.get("topics") or ()), cursors)


def read_positions(
    landing: Storage, consumers: Iterable[str] = ()
) -> tuple[list[SinkPosition], list[str]]:
    """Positions of the named consumers (or every consumer found: a folder holding a
    ``state.json``), and the names of those without a readable ``state.json``."""
    names = [c for c in consumers if c]
    if not names:
        names = [c for c in landing.folders() if landing.exists(f"{c}/{STATE_FILE}")]
    positions, missing = [], []
    for name in names:
        try:
            raw = landing.read_bytes(f"{name}/{STATE_FILE}")
            if raw is None:
                missing.append(name)
                continue
            positions.append(parse_state(name, raw))
        except (OSError, ValueError, TypeError, AttributeError):
            missing.append(name)
    return positions, missing


def split_consumers(value: str | None) -> list[str]:
    return [c.strip() for c in (value or "").split(",") if c.strip()]
