"""The bytes of one audit-log leaf. Leaf ``i`` of a topic's tree is seq ``i + 1``, so no seq
can be left out unseen. Each leaf is UTF-8 text, one ``key value`` line each, ending in a
newline. A record the audit log holds::

    auditsync.audit-log/v1 record
    topic <topic>
    seq <seq>
    ts <ts, milliseconds since the epoch>
    data <SHA-256 of the payload text (UTF-8), lowercase hex: the row's data_sha256>
    meta <SHA-256 of meta (UTF-8), lowercase hex, or - when meta is null>
    tag <SHA-256 of tag, or ->
    node <SHA-256 of node, or ->
    origin <delivered | backfill | delivered_unverified>

A seq the source gave up before any copy was taken::

    auditsync.audit-log/v1 tombstone
    topic <topic>
    seq <seq>
    reason <cap | ttl | recreated | mixed | ...>

A seq the source holds but no consumer was owed (every consumer subscribed after it, or
filters it out), below a seq the audit log holds, so the log can grow past it::

    auditsync.audit-log/v1 uncopied
    topic <topic>
    seq <seq>

The leaf hash is SHA-256(0x00 || leaf bytes) (RFC 9162 section 2.1.1). Everything is
recomputable from ``auditsync audit-log show --json``: its rows, and its tombstone ranges
(:func:`tombstone_ranges`); a seq of the tree that is neither is uncopied.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.tombstones import Tombstone, consumer_reason

VERSION = "auditsync.audit-log/v1"
RECORD, TOMBSTONE, UNCOPIED = "record", "tombstone", "uncopied"
_WORD = re.compile(r"[A-Za-z0-9._:@-]+")


class LeafError(AuditsyncError):
    """An audit-log row that cannot be a leaf, or a leaf that is not one of ours."""


def _sha(text: str | None) -> str:
    return "-" if text is None else hashlib.sha256(text.encode()).hexdigest()


def _word(value: Any, what: str, seq: Any) -> str:
    text = str(value)
    if not _WORD.fullmatch(text):
        raise LeafError(f"seq {seq}: {what} {text!r} cannot be written in a leaf")
    return text


def record(row: Mapping[str, Any]) -> bytes:
    """The leaf of an audit-log row (the columns of ``audit-log show --json``). A row whose
    ``data_sha256`` is not the hash of its ``data`` is refused, naming its seq."""
    seq = row["seq"]
    data = _sha(row["data"])
    if row.get("data_sha256") is not None and row["data_sha256"] != data:
        raise LeafError(f"seq {seq}: data_sha256 is not the SHA-256 of its data")
    lines = [
        f"{VERSION} {RECORD}",
        f"topic {_word(row['topic'], 'topic', seq)}",
        f"seq {int(seq)}",
        f"ts {int(row['ts'])}",
        f"data {data}",
        f"meta {_sha(row.get('meta'))}",
        f"tag {_sha(row.get('tag'))}",
        f"node {_sha(row.get('node'))}",
        f"origin {_word(row['origin'], 'origin', seq)}",
    ]
    return ("\n".join(lines) + "\n").encode()


def tombstone(topic: str, seq: int, reason: str) -> bytes:
    lines = [
        f"{VERSION} {TOMBSTONE}",
        f"topic {_word(topic, 'topic', seq)}",
        f"seq {int(seq)}",
        f"reason {_word(reason, 'reason', seq)}",
    ]
    return ("\n".join(lines) + "\n").encode()


def uncopied(topic: str, seq: int) -> bytes:
    lines = [f"{VERSION} {UNCOPIED}", f"topic {_word(topic, 'topic', seq)}", f"seq {int(seq)}"]
    return ("\n".join(lines) + "\n").encode()


def fields(leaf: bytes) -> dict[str, str]:
    """A leaf's lines as a mapping, ``kind`` for its first line's second word."""
    try:
        lines = leaf.decode().split("\n")
    except UnicodeDecodeError:
        raise LeafError("a leaf is not UTF-8") from None
    head = lines[0].split(" ")
    if len(head) != 2 or head[0] != VERSION or lines[-1] != "":
        raise LeafError(f"not an {VERSION} leaf")
    out = {"kind": head[1]}
    for line in lines[1:-1]:
        key, _, value = line.partition(" ")
        out[key] = value
    return out


def reason_at(seq: int, gaps: Sequence[Tombstone]) -> str | None:
    """Why the source gave up ``seq`` (its gaps rows' reasons, as a consumer sees them), or
    None when no gap holds it."""
    reasons = [g.reason for g in gaps if g.gap_from <= seq <= g.gap_to]
    return consumer_reason(reasons) if reasons else None


def entries(
    topic: str,
    first_seq: int,
    rows: Iterable[Mapping[str, Any]],
    gaps: Sequence[Tombstone],
    first_missing: Callable[[int, int], int] | None = None,
) -> Iterator[bytes]:
    """The leaves of seqs ``first_seq``, ``first_seq + 1``, …: a row's record leaf, else a
    tombstone leaf for a seq inside ``gaps``, else, below a seq the audit log holds, an
    uncopied leaf for a seq the source still holds (``first_missing(lo, hi)``: the first seq of
    ``lo..hi`` the source does not hold, ``hi + 1`` when it holds them all; None: ask nobody).
    They stop before the first seq that is none of these (not judged yet, or a gap nobody
    signalled: the tree covers only what is final). ``rows`` come in seq order."""
    seq = first_seq
    for row in rows:
        at = int(row["seq"])
        if at < seq:
            if at == seq - 1 and seq > first_seq:
                raise LeafError(f"seq {at} of {topic} appears twice in the audit log")
            continue
        held = seq - 1  # the source holds seq .. held (asked once per run of uncopied seqs)
        while seq < at:
            reason = reason_at(seq, gaps)
            if reason is not None:
                yield tombstone(topic, seq, reason)
            else:
                if seq > held and first_missing is not None:
                    held = first_missing(seq, at - 1) - 1
                if seq > held:
                    return
                yield uncopied(topic, seq)
            seq += 1
        yield record(row)
        seq += 1
    while (reason := reason_at(seq, gaps)) is not None:
        yield tombstone(topic, seq, reason)
        seq += 1


def tombstone_ranges(
    gaps: Sequence[Tombstone], lo: int, hi: int | None, rows: Collection[int] = ()
) -> list[tuple[int, int, str]]:
    """The tombstone leaves of seqs ``lo..hi`` (``hi`` None: up to the last gap) as maximal
    ``(first, last, reason)`` ranges: the seqs inside ``gaps`` with no row in ``rows`` (a seq
    copied before the source gave it up is a record leaf), each range one reason
    (:func:`reason_at`). Their number follows the gaps and rows, never the seqs they span."""
    end = max((g.gap_to for g in gaps), default=lo - 1) if hi is None else hi
    cuts = {lo, end + 1}
    for g in gaps:
        cuts.update((g.gap_from, g.gap_to + 1))
    held = set(rows)
    for seq in held:
        cuts.update((seq, seq + 1))
    points = sorted(c for c in cuts if lo <= c <= end + 1)
    out: list[tuple[int, int, str]] = []
    for first, after in itertools.pairwise(points):
        reason = None if first in held else reason_at(first, gaps)
        if reason is None:
            continue
        if out and out[-1][1] == first - 1 and out[-1][2] == reason:
            out[-1] = (out[-1][0], after - 1, reason)
        else:
            out.append((first, after - 1, reason))
    return out
