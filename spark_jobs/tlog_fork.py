"""A rewound source made a visible fork of a topic's signed log, never a silent rewrite.

When a run's reconcile reports ``source_rewound`` ranges of a topic (a failover to a lagging
replica, a restore) and the audit log then differs from the signed log at a seq inside them,
the signed log cannot grow: its checkpoint pins what the source lost. :func:`fork` starts the
topic's next log under ``tlog/<topic>/forks/<k>/``: the signed leaves before that seq, then
the audit log's leaves from it, signed as a checkpoint of the same origin that is not
consistent with the old one, so an auditor who follows the old log sees the break. The break
is recorded beside the new log (``break``, JSON) and with the run: the topic, the first seq
that differs, the rewound ranges, the reason and both signed checkpoints. The old log stays as
it was signed, on storage: the seqs before the break prove into both.

A fork costs the leaves before the break once (read from the old log's entry bundles, checked
against its tiles, written into the new log's); it happens only when a rewound source changed
signed seqs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import Any

from spark_jobs.common.statuses import SOURCE_REWOUND
from spark_jobs.tlog_store import TlogError, TopicLog
from watch_service.protocol.tlog import merkle, note, tiles

RECORD = "break"


@dataclasses.dataclass(frozen=True)
class Break:
    """Why the topic's log after ``epoch`` forks does not extend the one before it."""

    topic: str
    epoch: int  # the new log is forks/<epoch>
    seq: int  # the first seq that differs from the old log
    spans: tuple[tuple[int, int], ...]  # the rewound ranges (inclusive) the run reported
    reason: str
    run_id: str | None
    old: str  # the old log's last signed checkpoint
    new: str  # the new log's first signed checkpoint

    def record(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "epoch": self.epoch,
            "seq": self.seq,
            "range": [list(s) for s in self.spans],
            "reason": self.reason,
            "run_id": self.run_id,
            "old": self.old,
            "new": self.new,
        }

    @classmethod
    def parse(cls, data: bytes) -> Break:
        try:
            r = json.loads(data)
            spans = tuple((int(a), int(b)) for a, b in r["range"])
            return cls(
                r["topic"], int(r["epoch"]), int(r["seq"]), spans, str(r["reason"]),
                r["run_id"], r["old"], r["new"],
            )  # fmt: skip
        except (ValueError, KeyError, TypeError):
            raise TlogError("a fork's break record is not one of ours") from None

    def line(self, verifier: note.Verifier, origin: str) -> str:
        """One line: where the log forks, why, and the two checkpoints' sizes and roots."""
        old = note.open_checkpoint(self.old, verifier, origin)
        new = note.open_checkpoint(self.new, verifier, origin)
        spans = ", ".join(f"{a}..{b}" for a, b in self.spans)
        return (
            f"{self.topic}: the signed log forks at seq {self.seq} ({self.reason}: seqs {spans}, "
            f"run {self.run_id}): the checkpoint of size {old.size} (root {_root(old)}) is not "
            f"extended by the checkpoint of size {new.size} (root {_root(new)}); seqs "
            f"1..{self.seq - 1} prove into both"
        )


def _root(cp: note.Checkpoint) -> str:
    return cp.text().split("\n")[2]


def breaks(log: TopicLog) -> list[Break]:
    """The breaks before ``log`` (the log after each fork up to its own), oldest first."""
    out = []
    for epoch in range(1, log.epoch + 1):
        data = log.at_epoch(epoch).storage.read_bytes(RECORD)
        if data is None:
            raise TlogError(f"fork {epoch} of {log.topic} has no break record")
        out.append(Break.parse(data))
    return out


def agree_before(old: TopicLog, new: TopicLog, b: Break) -> None:
    """The two signed logs hold the same leaves before the break (their prefix roots agree,
    each read from tiles its own signed checkpoint authenticates)."""
    old_cp, new_cp = old.open(b.old), new.open(b.new)
    size = min(b.seq - 1, old_cp.size, new_cp.size)
    if size and merkle.tree_hash(old.hashes(old_cp), size) != merkle.tree_hash(
        new.hashes(new_cp), size
    ):
        raise TlogError(
            f"{old.topic}: the logs before and after fork {b.epoch} differ before seq {b.seq}"
        )


def prefix(log: TopicLog, checkpoint: note.Checkpoint, count: int) -> Iterator[bytes]:
    """The first ``count`` signed entries of ``log``, each checked against its tile."""
    src = log.hashes(checkpoint)
    for n in range((count + tiles.WIDTH - 1) >> tiles.HEIGHT):
        first = n << tiles.HEIGHT
        last = min(first + tiles.WIDTH, count)
        bundle = log.entries(checkpoint.size, n)[: last - first]
        if [merkle.leaf_hash(e) for e in bundle] != log.leaf_hashes(src, first, last):
            raise TlogError(f"the entries of {log.topic} do not match its tile/0 {n}")
        yield from bundle


def fork(
    old: TopicLog,
    signer: note.Signer,
    seq: int,
    leaves_from: Iterable[bytes],
    spans: Iterable[tuple[int, int]],
    run_id: str | None,
    reason: str = SOURCE_REWOUND,
) -> tuple[TopicLog, Break]:
    """The topic's next log: ``old``'s leaves before ``seq``, then ``leaves_from`` (the audit
    log's leaves of ``seq`` on), signed (as ``runs/<run_id>`` too), with its break record."""
    found = old.latest()
    if found is None:
        raise TlogError(f"{old.topic} has no signed checkpoint to fork from")
    old_cp, old_signed = found
    new = old.at_epoch(old.epoch + 1)
    if new.latest() is not None:
        raise TlogError(f"fork {new.epoch} of {old.topic} is already signed")

    def leaves() -> Iterator[bytes]:
        yield from prefix(old, old_cp, seq - 1)
        yield from leaves_from

    _, signed = new.append(signer, leaves(), run_id=run_id)
    b = Break(old.topic, new.epoch, seq, tuple(sorted(spans)), reason, run_id, old_signed, signed)
    new.write_once(RECORD, (json.dumps(b.record(), sort_keys=True) + "\n").encode())
    return new, b
