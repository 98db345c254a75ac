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
    forks: tuple[str, ...] = ()  # the breaks between them (``tlog_fork.Break.line``)

    def line(self) -> str:
        root = note.Checkpoint.text(self.checkpoint).split("\n")[2]
        out = (
            f"{self.topic}: seqs {self.start + 1}..{self.checkpoint.size} of the audit log match "
            f"the signed log (size {self.checkpoint.size}, root {root})"
        )
        if self.since is not None and not self.forks:
            out += f", which extends the signed log of size {self.since.size}"
        return "\n".join([out, *self.forks])


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


def _signed_entry(topic: str, seq: int, signed: _Expected) -> dict[str, str]:
    entry = signed.entry(seq)
    if merkle.leaf_hash(entry) != signed.hash(seq):
        raise TlogError(f"the stored entry of {topic} seq {seq} does not match its tile")
    try:
        return {**leaf.fields(entry), "bytes": entry.decode()}
    except leaf.LeafError:
        return {}


def _no_row(topic: str, seq: int, signed: _Expected) -> None:
    """A seq the audit log has no row of must be a signed tombstone or uncopied leaf."""
    kind = _signed_entry(topic, seq, signed)
    if kind.get("kind") == leaf.UNCOPIED:
        expected = leaf.uncopied(topic, seq)
    elif kind.get("kind") == leaf.TOMBSTONE:
        expected = leaf.tombstone(topic, seq, kind.get("reason", ""))
    else:
        raise VerifyFailure(
            topic, seq, "the audit log has no row of it; the signed log holds a record"
        )
    if kind["bytes"].encode() != expected:
        raise VerifyFailure(topic, seq, f"the signed {kind['kind']} leaf is not of this seq")


def _copied_later(topic: str, seq: int, signed: _Expected) -> bool:
    """A row of a seq signed as uncopied: a copy that came after (a consumer subscribed from
    earlier, a late copy). The signed log does not pin it; it is not a rewrite of it."""
    return signed.entry(seq) == leaf.uncopied(topic, seq) and (
        merkle.leaf_hash(leaf.uncopied(topic, seq)) == signed.hash(seq)
    )


def verify(
    log: TopicLog,
    table: Table,
    snapshot: int | None,
    from_run: str | None = None,
    to_run: str | None = None,
) -> Verified:
    """Recompute the leaves the signed log of ``to_run`` (default: the latest) holds after
    ``from_run``'s (default: all) from the audit log at ``snapshot``, and check the consistency
    of the two checkpoints. Raises :class:`VerifyFailure` at the first seq that differs. A
    fork between the two (a rewound source, ``tlog_fork``) is reported, not failed: the two
    logs must then agree before its seq, and only the leaves from there are recomputed."""
    from spark_jobs.tlog_command import log_of
    from spark_jobs.tlog_fork import agree_before, breaks

    to_log = log_of(log, to_run)
    cp, _ = checkpoint_of(to_log, to_run)
    src = to_log.hashes(cp)
    forks = breaks(to_log)
    for b in forks:  # every log before this one agrees with the next before its break
        agree_before(to_log.at_epoch(b.epoch - 1), to_log.at_epoch(b.epoch), b)
    since, start = None, 0
    if from_run is not None:
        from_log = log_of(log, from_run)
        since, _ = checkpoint_of(from_log, from_run)
        forks = [b for b in forks if b.epoch > from_log.epoch]
        start = min([since.size, *(b.seq - 1 for b in forks)])
        try:
            if forks:  # the logs agree on the seqs before the first break
                if merkle.tree_hash(from_log.hashes(since), start) != merkle.tree_hash(src, start):
                    raise merkle.ProofError("the prefixes differ")
            else:
                p = merkle.consistency_proof(src, since.size, cp.size)
                merkle.verify_consistency(since.size, cp.size, since.root, cp.root, p)
        except merkle.ProofError:
            raise TlogError(
                f"{log.topic}: the signed log of size {cp.size} does not extend the signed log "
                f"of size {since.size} (run {from_run})"
            ) from None
    check_range(to_log, src, table, snapshot, start, cp.size)
    return Verified(
        log.topic, start, cp, since, tuple(b.line(log.verifier, log.origin) for b in forks)
    )


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
        if found != signed.hash(at) and not _copied_later(log.topic, at, signed):
            raise VerifyFailure(log.topic, at, "the audit log's row is not the row that was signed")
        last, seq = at, at + 1
    while seq <= end:
        _no_row(log.topic, seq, signed)
        seq += 1
