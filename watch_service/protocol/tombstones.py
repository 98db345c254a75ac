"""Tombstone arithmetic: which seqs a consumer can never get, and why.

Ranges are inclusive. The gaps table records ``cap``, ``ttl`` and ``deleted``; a consumer sees
a deleted-then-recreated range as ``recreated``, and a range spanning several reasons as
``mixed``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, slots=True)
class Tombstone:
    reason: str
    gap_from: int
    gap_to: int

    def as_dict(self) -> dict:
        return {"reason": self.reason, "gap_from": self.gap_from, "gap_to": self.gap_to}


def missed_range(cursor: int, earliest_seq: int) -> tuple[int, int] | None:
    """Seqs after ``cursor`` that are no longer retained, or None if nothing was missed."""
    if cursor + 1 < earliest_seq:
        return cursor + 1, earliest_seq - 1
    return None


def consumer_reason(stored: Iterable[str]) -> str:
    reasons = {"recreated" if r == "deleted" else r for r in stored}
    if len(reasons) == 1:
        return reasons.pop()
    # No gaps row at all cannot happen under invariant L2; several reasons make a mixed range.
    return "mixed"
