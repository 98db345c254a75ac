"""Which seqs of the search index a run checks, as pure functions (the I/O is
``index_check.py``).

Per topic of an indexing consumer (one whose sink keeps the index, and whose index has reached
the frames this run compacted: ``behind``), a run checks:

- its own windows, the seqs it judged: a hole or a stale document among new records is found
  by the run that judged them;
- a slice of the history earlier runs verified (below its windows), ``(scrubbed_through,
  …]``, as many seqs as its windows hold and never fewer than :data:`SCRUB_MIN`, resumed
  where the previous run's slice ended and started over from the bottom once it reaches the
  windows. A
  document lost or changed in an already verified window (a restore of the index's database,
  a hand edit) is therefore found within ``history / max(window, SCRUB_MIN)`` runs, and in
  the next run while the history is under ``SCRUB_MIN`` seqs.

So a run's check costs what its windows hold plus at most as much again (or ``SCRUB_MIN``
seqs) per topic: it follows the window, never the history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from spark_jobs.common.spans import merge
from watch_service.store.index_runs import Window

SCRUB_MIN = 4 * 1024


def behind(
    marks: Mapping[str, int], compacted: Mapping[str, int], consumers: Iterable[str]
) -> dict[str, tuple[int, int]]:
    """Indexing ``consumers`` whose index mark has not reached the frame this run compacted
    for them: consumer → (mark, compacted). The sink indexes off its landing's critical path,
    so its index may trail what the run judged by a moment."""
    return {
        c: (marks[c], compacted[c])
        for c in sorted(set(consumers))
        if c in marks and marks[c] < compacted.get(c, 0)
    }


class Check(NamedTuple):
    topic: str
    ranges: tuple[tuple[int, int], ...]  # (lo, hi]: seqs lo+1 .. hi
    filtered: tuple[str, ...]  # a node every indexing consumer of the topic filters out
    scrubbed_through: int  # where this run's slice of the history ends


def _merged(spans: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """(lo, hi] spans, empty ones dropped, overlapping or adjacent ones merged."""
    inclusive = merge((lo + 1, hi) for lo, hi in spans if hi > lo)
    return tuple((a - 1, b) for a, b in inclusive)


def plan(
    windows: Iterable[Window],
    indexing: set[str],
    scrubbed: Mapping[str, int],
    minimum: int = SCRUB_MIN,
) -> list[Check]:
    """The checks of one run, by topic: ``windows`` are the run's, ``indexing`` the consumers
    that keep the index, ``scrubbed`` each topic's ``scrubbed_through`` so far."""
    per_topic: dict[str, list[Window]] = {}
    for w in windows:
        if w.consumer in indexing:
            per_topic.setdefault(w.topic, []).append(w)
    checks = []
    for topic, ws in sorted(per_topic.items()):
        nodes = {w.filter_node for w in ws}
        filtered = (next(iter(nodes)),) if len(nodes) == 1 and None not in nodes else ()
        verified = min(w.seq_from for w in ws)  # what earlier runs verified, below
        own = _merged((w.seq_from, w.seq_to) for w in ws)
        budget = max(minimum, sum(hi - lo for lo, hi in own))
        start = scrubbed.get(topic, 0)
        start = 0 if start >= verified else start
        end = min(start + budget, verified)
        checks.append(Check(topic, _merged([*own, (start, end)]), filtered, end))  # type: ignore[arg-type]
    return checks


def summary(
    checks: Iterable[Check],
    found: Iterable[tuple[str, str, int]],
    left: Iterable[tuple[str, str, int]],
    repaired: int,
    lagging: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, object]:
    """The run's figures of the index check: seqs checked, defects by kind (``found``, ``left``
    are (kind, topic, seq)), documents written by the repair, and the found seqs as inclusive
    ranges per topic and kind; ``behind``: the indexing consumers not checked, their index
    trailing the run (consumer → [mark, compacted frame])."""
    found, left = list(found), list(left)
    ranges: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for kind, topic, seq in found:
        ranges.setdefault(topic, {}).setdefault(kind, []).append((seq, seq))
    spans = {
        topic: {kind: [list(s) for s in merge(held)] for kind, held in kinds.items()}
        for topic, kinds in sorted(ranges.items())
    }
    counts = {
        kind: sum(1 for k, _, _ in found if k == kind) for kind in ("missing", "stale", "extra")
    }
    return {
        "checked": sum(hi - lo for c in checks for lo, hi in c.ranges),
        **counts,
        "found": len(found),
        "repaired": repaired,
        "remaining": len(left),
        "ranges": spans,
        "behind": {c: list(v) for c, v in sorted((lagging or {}).items())},
    }
