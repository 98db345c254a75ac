"""A source that went back, seen through its watch sessions' cursors (pure).

The source keeps, per watch session, a cursor per topic (``watch_sessions``): how far it has
served the session. Each run the pipeline marks what it saw (``store.session_marks``: the
cursor, the session's stream generation, the payload hash of the record at the cursor) in its
own database, and the next run compares. A restore of the source, taken together with its
sessions table, puts the cursors back too; the heads and digests show it only where the
pipeline had verified the lost seqs, the cursors show it as far as any session was served.

A session's cursor for a topic now below its mark (``cursor < mark``) went back; it counts as
the source's when one of these holds:

- **The session's stream generation is not above the mark's.** Each stream takes the next
  generation, and within one stream the stored cursors only move forward (save-behind writes
  of the stream's own position; a live ``rewound`` frame moves them back when the source went
  back, which is the same finding). A lower cursor under the same or an older generation is
  the sessions table itself gone back: a restore, a failover.
- **A stream opened since, and the record the mark pointed at is gone or other.** A client may
  move a session's cursors back when it opens a stream (``Last-Event-ID``, ``cursor.rewind``),
  so a new generation's lower cursor alone says nothing of the source. It is a rewind when the
  seq the mark names now holds another payload, or is above the topic's head now. (Absent
  below the head, it was trimmed: no finding. A mark at no record says nothing.)

The range it reports (:func:`ranges`) is exactly ``max(cursor, verified) + 1 .. mark``: the
seqs the source had served the session by the pipeline's last look and no longer counts as
served, above ``verified``, the top of what the pipeline verified of the topic (its highest
stored digest range). At or below that the digests judge seq by seq, exactly
(``evidence.walk_down``); above it the marks are the pipeline's only memory of the source. A
seq in the range the restored copy still holds with its old content is reported too: the
cursor says the source forgot serving it, not that its content changed (the sinks' re-delivery
ranges tell which). Once a session has been served past its mark again its cursor no longer
shows the rewind, so a run reports it once, the first that sees it (each run's commit replaces
the marks); the top-range digest and the re-delivery ranges still do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from watch_service.store.session_marks import Mark, Seen

GENERATION = "generation"  # the sessions table went back
CONTENT = "content"  # a stream opened since, and the marked record is gone or other


class WentBack(NamedTuple):
    wid: str
    topic: str
    cursor: int  # the session's cursor now
    mark: int  # the cursor the pipeline saw
    reason: str  # GENERATION or CONTENT


def went_back(marks: Iterable[Mark], now: Iterable[Seen]) -> list[WentBack]:
    """The sessions' cursors below their marks that count as the source's (the rules above),
    in (wid, topic) order."""
    held: Mapping[tuple[str, str], Mark] = {(m.wid, m.topic): m for m in marks}
    out = []
    for seen in now:
        mark = held.get((seen.wid, seen.topic))
        if mark is None or seen.cursor >= mark.cursor:
            continue
        reason = None
        if seen.stream_gen <= mark.stream_gen:
            reason = GENERATION
        elif mark.payload_hash is not None and _gone_or_other(mark, seen):
            reason = CONTENT
        if reason:
            out.append(WentBack(seen.wid, seen.topic, seen.cursor, mark.cursor, reason))
    return sorted(out)


def ranges(back: Iterable[WentBack], verified: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """(topic, lo, hi) inclusive: each cursor's ``max(cursor, verified[topic]) + 1 .. mark``,
    where not empty (``verified``: the top seq of the topic's stored digests; absent: 0)."""
    out = []
    for b in back:
        lo = max(b.cursor, verified.get(b.topic, 0)) + 1
        if lo <= b.mark:
            out.append((b.topic, lo, b.mark))
    return out


def _gone_or_other(mark: Mark, seen: Seen) -> bool:
    if seen.at_mark is not None:
        return seen.at_mark != mark.payload_hash
    return seen.head_seq is not None and mark.cursor > seen.head_seq
