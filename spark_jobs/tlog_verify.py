"""``auditsync audit-log verify``: a topic's signed log recomputed from the audit log. The
leaves the signed log of a run (default: the latest) holds after an earlier run's (default: all)
are rebuilt from the audit-log rows and compared with the tree's tiles, each authenticated
against the signed checkpoint; the two checkpoints must be consistent. The first seq that
differs is a :class:`VerifyFailure` naming it; its cost follows the leaves between the runs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from spark_jobs.tlog_command import checkpoint_of, rows_from
from spark_jobs.tlog_store import TlogError, TopicLog
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.tlog import leaf, merkle, note, tiles

if TYPE_CHECKING:
    from pyiceberg.table import Table


class VerifyFailure(AuditsyncError):
    """The audit log differs from the signed log at ``seq``."""

    def __init__(self, topic: str, seq: int, why: str) -> None:
        super().__init__(f"{topic}: seq {seq} differs from the signed log: {why}")
        self.seq = seq


@dataclasses.dataclass(frozen=True)
class Verified:
    topic: str
    start: int  # seqs start + 1 .. checkpoint.size were recomputed
    checkpoint: note.Checkpoint
    since: note.Checkpoint | None

    def line(self) -> str:
        root = note.Checkpoint.text(self.checkpoint).split("\n")[2]
        out = (
            f"{self.topic}: seqs {self.start + 1}..{self.checkpoint.size} of the audit log match "
            f"the signed log (size {self.checkpoint.size}, root {root})"
        )
        if self.since is not None:
            out += f", which extends the signed log of size {self.since.size}"
        return out


class _Expected:
    """The signed leaves, a level-0 tile (and its bundle, when needed) at a time."""

    def __init__(self, log: TopicLog, src: tiles.TileHashes, size: int) -> None:
        self.log, self.src, self.size = log, src, size
        self.n: int | None = None
        self.hashes: list[bytes] = []
        self.bundle: list[bytes] | None = None

    def hash(self, seq: int) -> bytes:
        n = (seq - 1) >> tiles.HEIGHT
        if n != self.n:
            first = n << tiles.HEIGHT
            self.n = n
            self.hashes = self.log.leaf_hashes(self.src, first, min(first + tiles.WIDTH, self.size))
            self.bundle = None
        return self.hashes[(seq - 1) % tiles.WIDTH]

    def entry(self, seq: int) -> bytes:
        self.hash(seq)
        if self.bundle is None:
            self.bundle = self.log.entries(self.size, (seq - 1) >> tiles.HEIGHT)
        return self.bundle[(seq - 1) % tiles.WIDTH]


def _no_row(topic: str, seq: int, signed: _Expected) -> None:
    """A seq the audit log has no row of must be a signed tombstone."""
    entry = signed.entry(seq)
    if merkle.leaf_hash(entry) != signed.hash(seq):
        raise TlogError(f"the stored entry of {topic} seq {seq} does not match its tile")
    try:
        kind = leaf.fields(entry)
    except leaf.LeafError:
        kind = {}
    if kind.get("kind") != leaf.TOMBSTONE:
        raise VerifyFailure(
            topic, seq, "the audit log has no row of it; the signed log holds a record"
        )
    if entry != leaf.tombstone(topic, seq, kind.get("reason", "")):
        raise VerifyFailure(topic, seq, "the signed tombstone is not of this seq")


def verify(
    log: TopicLog,
    table: Table,
    snapshot: int | None,
    from_run: str | None = None,
    to_run: str | None = None,
) -> Verified:
    """Recompute the leaves the signed log of ``to_run`` (default: the latest) holds after
    ``from_run``'s (default: all) from the audit log at ``snapshot``, and check the consistency
    of the two checkpoints. Raises :class:`VerifyFailure` at the first seq that differs."""
    cp, _ = checkpoint_of(log, to_run)
    src = log.hashes(cp)
    since = None
    if from_run is not None:
        since, _ = checkpoint_of(log, from_run)
        try:
            p = merkle.consistency_proof(src, since.size, cp.size)
            merkle.verify_consistency(since.size, cp.size, since.root, cp.root, p)
        except merkle.ProofError:
            raise TlogError(
                f"{log.topic}: the signed log of size {cp.size} does not extend the signed log "
                f"of size {since.size} (run {from_run})"
            ) from None
    start = since.size if since else 0
    check_range(log, src, table, snapshot, start, cp.size)
    return Verified(log.topic, start, cp, since)


def check_range(
    log: TopicLog, src: tiles.TileHashes, table: Table, snapshot: int | None, start: int, end: int
) -> None:
    """Recompute seqs ``start + 1 .. end`` from the audit log at ``snapshot`` and compare each
    with the signed tree ``src`` authenticates; raises :class:`VerifyFailure` at the first seq
    that differs. Its cost follows ``end - start``."""
    signed = _Expected(log, src, src.size)
    seq, last = start + 1, None
    for row in rows_from(table, snapshot, log.topic, start, [], upto=end):
        at = int(row["seq"])
        if at == last:
            raise VerifyFailure(log.topic, at, "the audit log holds it twice")
        while seq < at:
            _no_row(log.topic, seq, signed)
            seq += 1
        try:
            found = merkle.leaf_hash(leaf.record(row))
        except leaf.LeafError as exc:
            raise VerifyFailure(log.topic, at, str(exc).split(": ", 1)[-1]) from None
        if found != signed.hash(at):
            raise VerifyFailure(log.topic, at, "the audit log's row is not the row that was signed")
        last, seq = at, at + 1
    while seq <= end:
        _no_row(log.topic, seq, signed)
        seq += 1
