"""A sink's evidence of re-delivery: seqs it was sent at or below its own cursor for their
topic, as ranges, each with what the sink could tell of them. Shared by the sink, which writes
it into the footer of the segment that lands those copies (``FOOTER_REDELIVERED``), and the
pipeline, which reads it back (compact) and reports it with the run.

A range's ``verdict``:

- ``duplicate``: every copy is the one the sink landed before (same ``$ts``, same payload
  hash): plain at-least-once delivery, e.g. a server that resumed from cursors it had not yet
  persisted;
- ``reissued``: the copies differ from the ones landed before: the source issued those seqs
  again, as a source (and its sessions) restored to an earlier copy does;
- ``unchecked``: the sink no longer holds the earlier copies' hashes (it restarted since, or
  they are further back than it keeps), so only the pipeline's comparison can tell.

``cursor`` is the sink's cursor of the topic when the range arrived, ``frames`` the first and
last frame that carried it. Ranges are inclusive; one range is one topic, one verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DUPLICATE, REISSUED, UNCHECKED = "duplicate", "reissued", "unchecked"
VERDICTS = (DUPLICATE, REISSUED, UNCHECKED)
FOOTER_REDELIVERED = "redelivered"


@dataclasses.dataclass(frozen=True, slots=True)
class Redelivery:
    topic: str
    seq_from: int
    seq_to: int
    verdict: str
    cursor: int
    frames: tuple[int, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "seq_from": self.seq_from,
            "seq_to": self.seq_to,
            "verdict": self.verdict,
            "cursor": self.cursor,
            "frames": list(self.frames),
        }

    @classmethod
    def parse(cls, item: Mapping[str, Any]) -> Redelivery:
        a, b = item["frames"]
        return cls(
            str(item["topic"]), int(item["seq_from"]), int(item["seq_to"]),
            str(item["verdict"]), int(item["cursor"]), (int(a), int(b)),
        )  # fmt: skip


def from_footer(footer: Mapping[str, Any] | None) -> list[Redelivery]:
    """The re-delivery ranges a segment's footer records (none for a footer without them)."""
    return [Redelivery.parse(i) for i in (footer or {}).get(FOOTER_REDELIVERED) or ()]


def merge(ranges: Iterable[Redelivery]) -> list[Redelivery]:
    """Ranges in frame order with each run of contiguous seqs of one topic and verdict (split
    by a segment boundary) as one range; the cursor is the first's."""
    out: list[Redelivery] = []
    last: dict[str, int] = {}  # topic -> index in out of its latest range
    for r in ranges:
        at = last.get(r.topic)
        prev = out[at] if at is not None else None
        if prev is not None and prev.verdict == r.verdict and prev.seq_to + 1 == r.seq_from:
            out[at] = dataclasses.replace(  # type: ignore[index]
                prev, seq_to=r.seq_to, frames=(prev.frames[0], r.frames[1])
            )
            continue
        last[r.topic] = len(out)
        out.append(r)
    return out


def describe(consumer: str, ranges: Sequence[Redelivery]) -> list[str]:
    """One line per range: what the run reports."""
    return [
        f"{consumer} {r.topic}: seqs {r.seq_from}..{r.seq_to} re-delivered at or below its "
        f"cursor {r.cursor} ({r.verdict}; frames {r.frames[0]}..{r.frames[1]})"
        for r in ranges
    ]
