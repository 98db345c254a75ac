"""Tombstone arithmetic: which seqs a consumer can never get, and why.

Ranges are inclusive. The gaps table records ``cap``, ``ttl`` and ``deleted``; a consumer sees
a deleted-then-recreated range as ``recreated``, and a range spanning several reasons as
``mixed``.

A source that went back (a failover to a lagging replica, a restore from a backup) is the other
kind of loss: a cursor above the topic's head was served seqs the source no longer has, and
will write again with new content. That range is ``rewound_range``: ``head + 1 .. cursor``.
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


def rewound_range(cursor: int, head_seq: int) -> tuple[int, int] | None:
    """Seqs a consumer at ``cursor`` was served that a topic whose head is ``head_seq`` no
    longer has, or None when the cursor is not above the head."""
    if cursor > head_seq:
        return head_seq + 1, cursor
    return None


def consumer_reason(stored: Iterable[str]) -> str:
    reasons = {"recreated" if r == "deleted" else r for r in stored}
    if len(reasons) == 1:
        return reasons.pop()
    # No gaps row at all cannot happen under invariant L2; several reasons make a mixed range.
    return "mixed"
