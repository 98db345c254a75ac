"""The audit log as a verifiable log: publishing a topic's tree after a run, proving a seq and
reading the log, for the commands (their parsers and dispatch are ``tlog_cli``'s)

    auditsync audit-log key                    print the verifier key to publish
    auditsync audit-log keygen --name NAME     print a new signing key (dev: nothing is stored)
    auditsync audit-log publish --work W [--topic T] [--run RUN_ID]
    auditsync audit-log prove   --work W --topic T --seq N [--as-of RUN_ID]
    auditsync audit-log verify  --work W --topic T [--from RUN_A] [--to RUN_B]

:func:`publish` is what a run calls once its verify passed: per topic, the audit-log rows after
the last checkpoint become leaves (``protocol.tlog.leaf``; a seq the source gave up is a
tombstone leaf, the first seq that is neither ends the tree for now), their tiles are written
and the checkpoint signed (``spark_jobs.tlog_store``). ``verify`` recomputes the leaves from
the audit log and compares them with the signed tree's tiles: it prints one line naming the
first seq that differs and exits 1, or one line of what it checked. Keys come from settings
(``AUDITSYNC_LOG_SIGNING_KEY`` or ``AUDITSYNC_LOG_SIGNING_KEY_FILE``; ``AUDITSYNC_LOG_VERIFIER_KEY``
or ``--verifier-key`` to prove and verify without the signing key); none is ever generated
unasked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_jobs.tlog_store import TlogError, TopicLog
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.tlog import leaf, merkle, note, proof, tiles
from watch_service.protocol.tombstones import Tombstone
from watch_service.storage import Storage

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from watch_service.settings import Settings

WINDOW = 65_536  # seqs read from the audit log per scan


# -- keys ----------------------------------------------------------------------------------------
def signer_of(settings: Settings) -> note.Signer:
    if settings.log_signing_key_file is not None:
        where = f"AUDITSYNC_LOG_SIGNING_KEY_FILE ({settings.log_signing_key_file})"
        try:
            text = settings.log_signing_key_file.read_text()
        except OSError as exc:
            raise TlogError(f"{where}: cannot read it: {exc.strerror}") from None
    elif settings.log_signing_key is not None:
        where, text = "AUDITSYNC_LOG_SIGNING_KEY", settings.log_signing_key
    else:
        raise TlogError(
            "no signing key: set AUDITSYNC_LOG_SIGNING_KEY or AUDITSYNC_LOG_SIGNING_KEY_FILE "
            "(`auditsync audit-log keygen --name NAME` prints a new one)"
        )
    try:
        return note.Signer.parse(text)
    except note.NoteError as exc:
        raise TlogError(f"{where}: {exc}") from None


def verifier_of(settings: Settings, given: str | None = None) -> note.Verifier:
    text = given or settings.log_verifier_key
    if text is None:
        return signer_of(settings).verifier
    try:
        return note.Verifier.parse(text)
    except note.NoteError as exc:
        raise TlogError(
            f"{'--verifier-key' if given else 'AUDITSYNC_LOG_VERIFIER_KEY'}: {exc}"
        ) from None


# -- the audit log, a window of seqs at a time ---------------------------------------------------
def rows_from(
    table: Table,
    snapshot: int | None,
    topic: str,
    after: int,
    gaps: Sequence[Tombstone],
    upto: int | None = None,
) -> Iterator[dict[str, Any]]:
    """``topic``'s rows with seq > ``after`` (up to ``upto``) in seq order, one window per scan;
    an empty window ends them unless a gap holds its start or a row follows it (the leaves
    jump the gap, or the seqs nobody copied)."""
    from pyiceberg.expressions import And, EqualTo, GreaterThan, LessThanOrEqual

    if snapshot is None:
        return
    lo = after
    while upto is None or lo < upto:
        hi = lo + WINDOW if upto is None else min(lo + WINDOW, upto)
        wanted = And(
            EqualTo("topic", topic),  # type: ignore[call-arg, arg-type]
            And(GreaterThan("seq", lo), LessThanOrEqual("seq", hi)),  # type: ignore[call-arg, arg-type]
        )
        rows = readers.scan(table, snapshot, wanted).sort_by([("seq", "ascending")]).to_pylist()
        yield from rows
        if not rows and upto is None:
            covering = [g.gap_to for g in gaps if g.gap_from <= lo + 1 <= g.gap_to]
            if covering:
                hi = max(max(covering), hi)
            elif not readers.scan(
                table,
                snapshot,
                And(EqualTo("topic", topic), GreaterThan("seq", hi)),  # type: ignore[call-arg, arg-type]
                ("seq",),
                limit=1,
            ).num_rows:
                return  # nothing after: a later row would make the window's seqs uncopied
        lo = hi


def current_snapshot(table: Table, snapshot_id: int | None) -> int | None:
    """``snapshot_id``, else the table's current snapshot (None for an empty table)."""
    if snapshot_id is not None:
        return snapshot_id
    current = table.current_snapshot()
    return None if current is None else current.snapshot_id


def leaves_after(
    conn: Any,
    table: Table,
    snapshot: int | None,
    topic: str,
    after: int,
    gaps: Sequence[Tombstone] | None = None,
) -> Iterator[bytes]:
    """The leaves of ``topic``'s seqs after ``after`` (``protocol.tlog.leaf.entries``): the
    audit log's rows at ``snapshot``, and what the source (``conn``) says of the seqs between
    them (``gaps``, default: its recorded gaps)."""
    from watch_service.store.gap_reads import first_missing, topic_gaps

    held = topic_gaps(conn, topic) if gaps is None else gaps
    rows = rows_from(table, snapshot, topic, after, held)
    return leaf.entries(
        topic, after + 1, rows, held, lambda lo, hi: first_missing(conn, topic, lo, hi)
    )


# -- publish -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Published:
    topic: str
    old_size: int
    checkpoint: note.Checkpoint
    signed: str


def publish(
    work: str,
    database_url: str,
    signer: note.Signer,
    *,
    run_id: str | None = None,
    snapshot_id: int | None = None,
    topics: Sequence[str] | None = None,
    gaps: Mapping[str, Sequence[Tombstone]] | None = None,
    pipeline_url: str | None = None,
) -> list[Published]:
    """Grow each topic's log by the audit-log rows (at ``snapshot_id``, default now) after its
    last checkpoint, and sign the new checkpoint (kept as ``runs/<run_id>`` too). ``gaps``
    (default: read from PostgreSQL) give the tombstone leaves' reasons. Its cost follows the
    new leaves: one scan per window of new seqs, the tiles they change, two small reads.
    The catalog is read from ``pipeline_url`` (default: ``database_url``, the source's)."""
    import psycopg

    from spark_jobs import time_travel

    layout = Layout("", work, "")
    table = time_travel.load(layout, pipeline_url or database_url)
    snapshot = current_snapshot(table, snapshot_id)
    storage = Storage(layout.warehouse)
    out = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        for topic in topics if topics is not None else time_travel.topics(table, snapshot):
            log = TopicLog.at(storage, topic, signer.verifier)
            found = log.latest()
            old = found[0].size if found else 0
            held = gaps[topic] if gaps is not None and topic in gaps else None
            entries = leaves_after(conn, table, snapshot, topic, old, held)
            cp, signed = log.append(signer, entries, run_id=run_id)
            out.append(Published(topic, old, cp, signed))
    return out


# -- prove and verify ----------------------------------------------------------------------------
def log_of(log: TopicLog, run_id: str | None) -> TopicLog:
    """The log (``log``, or one before a fork of it) that holds ``run_id``'s checkpoint."""
    if run_id is None:
        return log
    for epoch in range(log.epoch, -1, -1):
        found = log.at_epoch(epoch)
        if found.storage.exists(f"runs/{run_id}"):
            return found
    raise TlogError(f"no checkpoint of {log.topic} was signed by run {run_id!r}")


def checkpoint_of(log: TopicLog, run_id: str | None) -> tuple[note.Checkpoint, str]:
    """The signed checkpoint of ``run_id`` (default: the latest) in ``log``."""
    signed = log.storage.read_bytes(f"runs/{run_id}") if run_id else None
    if run_id and signed is None:
        raise TlogError(f"no checkpoint of {log.topic} was signed by run {run_id!r}")
    text = signed.decode() if signed else log.signed()
    if text is None:
        raise TlogError(f"{log.topic} has no signed checkpoint yet: no run has published it")
    return log.open(text), text


def prove(log: TopicLog, seq: int, run_id: str | None = None) -> proof.Proof:
    """The tlog-proof of ``seq`` (entry ``seq - 1``), its leaf bytes as the proof's extra;
    ``run_id``'s checkpoint may be one of a log before a fork."""
    log = log_of(log, run_id)
    cp, signed = checkpoint_of(log, run_id)
    if not 1 <= seq <= cp.size:
        raise TlogError(f"seq {seq} of {log.topic} is not in its signed log (seqs 1..{cp.size})")
    src = log.hashes(cp)
    index = seq - 1
    entry = log.entries(cp.size, index >> tiles.HEIGHT)[index % tiles.WIDTH]
    if merkle.leaf_hash(entry) != log.leaf_hashes(src, index, seq)[0]:
        raise TlogError(f"the stored entry of seq {seq} does not match its tile")
    return proof.Proof(index, tuple(merkle.inclusion_proof(src, index, cp.size)), signed, entry)
