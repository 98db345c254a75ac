"""Fault injection for tests and demos: which delivered records the sink pretends to lose or
mangle, so the reconcile pipeline has defects to find.

Off by default. Pure: the fate of a record is a function of (seed, topic, seq) — plus, for
corruption, how many corruptions are already on record — so a record re-delivered after a crash
meets the same fate it met before. The sink persists every decision
(``faults/part-<first>-<last>.jsonl``) before the segment that omits or alters the record, and
reloads them into :class:`FaultBook`.

* drop: a fraction of records is left out of the landing (the cursor still advances).
* corrupt: up to N records land with altered ``data`` and a hash of the altered text, so the
  reconcile sees a payload mismatch. Candidates are a fixed sample of the stream
  (:data:`CORRUPT_SAMPLE`) so the N spread out instead of hitting the first N records.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable

DROP = "drop"
CORRUPT = "corrupt"
KINDS = (DROP, CORRUPT)
CORRUPT_SAMPLE = 0.25

FaultKey = tuple[str, str, int]  # (kind, topic, seq)


@dataclasses.dataclass(frozen=True)
class FaultPolicy:
    drop_fraction: float = 0.0
    corrupt: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.drop_fraction <= 1.0:
            raise ValueError(f"fault drop fraction must be within [0, 1], got {self.drop_fraction}")
        if self.corrupt < 0:
            raise ValueError(f"fault corrupt count must be >= 0, got {self.corrupt}")

    @property
    def enabled(self) -> bool:
        return self.drop_fraction > 0 or self.corrupt > 0

    def draw(self, salt: str, topic: str, seq: int) -> float:
        """A uniform value in [0, 1) fixed by (seed, salt, topic, seq)."""
        digest = hashlib.blake2b(
            f"{self.seed}\0{salt}\0{topic}\0{seq}".encode(), digest_size=8
        ).digest()
        return int.from_bytes(digest, "big") / 2**64

    def drops(self, topic: str, seq: int) -> bool:
        return self.drop_fraction > 0 and self.draw(DROP, topic, seq) < self.drop_fraction

    def may_corrupt(self, topic: str, seq: int) -> bool:
        return self.corrupt > 0 and self.draw(CORRUPT, topic, seq) < CORRUPT_SAMPLE

    def describe(self) -> str:
        return (
            f"FAULT INJECTION ON: dropping {self.drop_fraction:.2%} of records, corrupting "
            f"up to {self.corrupt} payloads (seed {self.seed}); this landing is NOT a "
            f"faithful copy"
        )


def corrupt_data(data_json: str) -> str:
    """The altered payload: still valid JSON, but its text (and so its hash) differs."""
    return '{"$fault":"corrupt","data":' + data_json + "}"


class FaultBook:
    """Every fault decided so far (reloaded ones included) and the ones not yet persisted."""

    def __init__(self, policy: FaultPolicy, known: Iterable[FaultKey] = ()) -> None:
        self.policy = policy
        self._known: set[FaultKey] = set(known)
        self._corrupted = sum(1 for kind, _, _ in self._known if kind == CORRUPT)
        self._new: list[FaultKey] = []

    def fate(self, topic: str, seq: int) -> str | None:
        """DROP, CORRUPT or None for this record; a new decision is remembered."""
        if not self.policy.enabled:
            return None
        for kind in KINDS:
            if (kind, topic, seq) in self._known:
                return kind
        if self.policy.drops(topic, seq):
            kind = DROP
        elif self._corrupted < self.policy.corrupt and self.policy.may_corrupt(topic, seq):
            kind = CORRUPT
            self._corrupted += 1
        else:
            return None
        self._known.add((kind, topic, seq))
        self._new.append((kind, topic, seq))
        return kind

    def take_new(self) -> list[FaultKey]:
        """Decisions made since the last call, to be persisted before the segment."""
        new, self._new = self._new, []
        return new

    @property
    def counts(self) -> dict[str, int]:
        return {kind: sum(1 for k, _, _ in self._known if k == kind) for kind in KINDS}
