"""The search index: PostgreSQL full text over delivered records (migrations 004, 011).

Schema, shared with the Spark backfill, which writes into the same table::

    search_documents(doc_key    text PRIMARY KEY,
                     topic      text NOT NULL,
                     seq        bigint NOT NULL,
                     ts         bigint NOT NULL,
                     tag        text,
                     data       jsonb NOT NULL,
                     body       tsvector GENERATED,     -- GIN index search_documents_body
                     updated_at timestamptz DEFAULT now())

* ``doc_key`` = ``topic + '/' + tag`` when the record has a ``$tag``, else
  ``topic + '/' + str(seq)`` (:func:`doc_key`).
* ``body`` = ``jsonb_to_tsvector('simple', data, '["string", "numeric"]')``: the string and
  number values at any depth, not the keys; a generated column, so no writer computes it.
* Every write is :data:`UPSERT`'s ``INSERT … ON CONFLICT (doc_key) DO UPDATE … WHERE
  excluded.seq >= search_documents.seq``: the newest seq per key wins and replaying a batch
  changes nothing, so the sink (after a crash) and the backfill may both write any record
  any number of times. One statement per batch, arrays unnested server-side; a batch must not
  name a key twice (:func:`documents` keeps the newest per key). Batches hold at most
  :data:`BATCH` documents.
* A source that went back (failover, restore) writes seqs again with new content. The sink
  applies the landed ``rewound`` range first (:class:`Rewound`, :data:`DROP_RANGE`): every
  document whose seq lies in it is deleted, a tag's document held by a rewound seq included,
  so the records written again are indexed afresh whatever seqs they carry. Replaying a
  segment replays the drop and then the upserts: the same end state.
* A document PostgreSQL refuses (jsonb cannot hold a ``\\u0000`` that a json column can) is
  logged, counted and skipped, so one record cannot wedge the index or block a repair.

Two entry points over the one statement and the one document builder:
:func:`upsert_documents` (async, used by the sink through :class:`SearchIndex`, which also
applies rewound ranges in landing order) and
:func:`upsert_documents_sync` (used by the Spark backfill from its driver), so a record the
sink indexed and the same record backfilled produce the same document.

The sink upserts a segment's records only after the segment is durable, and records how far
the index has got (``indexed_frame_no`` in the sink state), so a crash or an unreachable
database is caught up from the landing segments later. It records the same in the index's own
database (``search_index_marks``, one row per consumer, :data:`WRITE_MARK` after each applied
segment): a restore or failover of that database takes the documents and the mark back
together while the sink's state survives, so a mark below the sink's state says the index went
back, and the sink re-indexes from the mark (``sink/indexer``).
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterable, Iterator
from typing import NamedTuple

import psycopg

log = logging.getLogger("auditsync.search_index")

IndexRecord = tuple[str, int, int, str | None, str]  # (topic, seq, ts, tag, data JSON text)


class Rewound(NamedTuple):
    """Seqs ``seq_from .. seq_to`` (inclusive) of ``topic`` the source no longer has."""

    topic: str
    seq_from: int
    seq_to: int


IndexOp = IndexRecord | Rewound  # what the sink asks of the index, in landing order
Doc = tuple[str, str, int, int, str | None, str]  # (doc_key, topic, seq, ts, tag, data)
BATCH = 5_000

UPSERT = """
INSERT INTO search_documents AS d (doc_key, topic, seq, ts, tag, data)
SELECT u.doc_key, u.topic, u.seq, u.ts, u.tag, u.data::jsonb
  FROM unnest(%(keys)s::text[], %(topics)s::text[], %(seqs)s::bigint[], %(ts)s::bigint[],
              %(tags)s::text[], %(datas)s::text[]) AS u(doc_key, topic, seq, ts, tag, data)
ON CONFLICT (doc_key) DO UPDATE
   SET topic = excluded.topic, seq = excluded.seq, ts = excluded.ts, tag = excluded.tag,
       data = excluded.data, updated_at = now()
 WHERE excluded.seq >= d.seq
"""


DROP_RANGE = """
DELETE FROM search_documents
 WHERE topic = %(topic)s AND seq BETWEEN %(seq_from)s AND %(seq_to)s
"""


READ_MARK = "SELECT frame_no FROM search_index_marks WHERE consumer = %(consumer)s"
WRITE_MARK = """
INSERT INTO search_index_marks (consumer, frame_no) VALUES (%(consumer)s, %(frame_no)s)
ON CONFLICT (consumer) DO UPDATE SET frame_no = excluded.frame_no, updated_at = now()
"""


class Upserted(NamedTuple):
    written: int  # documents upserted (or left alone because a newer seq is indexed)
    refused: int  # documents PostgreSQL refused, skipped


def doc_key(topic: str, tag: str | None, seq: int) -> str:
    return f"{topic}/{tag}" if tag is not None else f"{topic}/{seq}"


def documents(records: Iterable[IndexRecord]) -> list[Doc]:
    """One document per key, the newest seq winning, in first-seen key order."""
    newest: dict[str, Doc] = {}
    for topic, seq, ts, tag, data in records:
        key = doc_key(topic, tag, seq)
        held = newest.get(key)
        if held is None or seq >= held[2]:
            newest[key] = (key, topic, seq, ts, tag, data)
    return list(newest.values())


def _batches(docs: list[Doc]) -> Iterator[list[Doc]]:
    for start in range(0, len(docs), BATCH):
        yield docs[start : start + BATCH]


def _params(docs: list[Doc]) -> dict[str, list]:
    keys, topics, seqs, ts, tags, datas = (list(c) for c in zip(*docs, strict=True))
    return {"keys": keys, "topics": topics, "seqs": seqs, "ts": ts, "tags": tags, "datas": datas}


def _refused(doc: Doc, exc: psycopg.DataError) -> None:
    log.error("search index refused %s (seq %d): %s", doc[0], doc[2], str(exc).strip())


# What an upsert does, as a generator that never blocks (psycopg's own split): it yields each
# batch to write and is sent back None when the batch committed or the DataError that refused
# it; a refused batch is retried a document at a time. The two drivers below only do the I/O.
Plan = Generator[list[Doc], "psycopg.DataError | None", Upserted]


def _plan(records: Iterable[IndexRecord]) -> Plan:
    written = refused = 0
    for batch in _batches(documents(records)):
        if (yield batch) is None:
            written += len(batch)
            continue
        for doc in batch:
            error = yield [doc]
            if error is None:
                written += 1
            else:
                refused += 1
                _refused(doc, error)
    return Upserted(written, refused)


def upsert_documents_sync(conn: psycopg.Connection, records: Iterable[IndexRecord]) -> Upserted:
    """Upsert the newest document per key of ``records``, a batch per transaction; a batch
    PostgreSQL refuses is retried a document at a time and the refused ones are skipped.
    ``conn`` should be in autocommit mode. Raises ``psycopg.OperationalError`` as it comes."""
    plan = _plan(records)
    try:
        batch = next(plan)
        while True:
            error = None
            try:
                with conn.transaction():
                    conn.execute(UPSERT, _params(batch))
            except psycopg.DataError as exc:
                error = exc
            batch = plan.send(error)
    except StopIteration as done:
        return done.value


async def upsert_documents(
    conn: psycopg.AsyncConnection, records: Iterable[IndexRecord]
) -> Upserted:
    """:func:`upsert_documents_sync` on an async connection: the same plan, awaited."""
    plan = _plan(records)
    try:
        batch = next(plan)
        while True:
            error = None
            try:
                async with conn.transaction():
                    await conn.execute(UPSERT, _params(batch))
            except psycopg.DataError as exc:
                error = exc
            batch = plan.send(error)
    except StopIteration as done:
        return done.value


class SearchIndex:
    """The sink's handle: one connection, opened lazily and dropped when it fails, so the next
    call reconnects."""

    def __init__(self, url: str, connect_timeout_s: int = 3) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self._conn: psycopg.AsyncConnection | None = None
        self.rejected = 0

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=self.connect_timeout_s
            )
        return self._conn

    async def apply(self, ops: Iterable[IndexOp]) -> int:
        """Apply ``ops`` in order: runs of records upserted (the newest document per key),
        each :class:`Rewound` range dropped; returns how many documents were sent.

        Raises ``psycopg.OperationalError`` when the database cannot be reached (the caller
        retries later). A document PostgreSQL refuses is logged, counted in ``rejected`` and
        skipped.
        """
        sent, run = 0, []
        try:
            for op in ops:
                if not isinstance(op, Rewound):
                    run.append(op)
                    continue
                sent, run = sent + await self._upsert(run), []
                await (await self._connection()).execute(DROP_RANGE, op._asdict())
            return sent + await self._upsert(run)
        except psycopg.OperationalError:
            await self.close()
            raise

    async def mark(self, consumer: str) -> int | None:
        """How far ``consumer``'s documents reach in this database (a frame number), or None
        when it holds no mark (an index that predates the marks, or a new consumer)."""
        try:
            cur = await (await self._connection()).execute(READ_MARK, {"consumer": consumer})
            row = await cur.fetchone()
        except psycopg.OperationalError:
            await self.close()
            raise
        return None if row is None else int(row[0])

    async def set_mark(self, consumer: str, frame_no: int) -> None:
        """Record that ``consumer``'s documents reach ``frame_no``; called after each applied
        segment, so the mark never claims more than the documents hold."""
        try:
            await (await self._connection()).execute(
                WRITE_MARK, {"consumer": consumer, "frame_no": frame_no}
            )
        except psycopg.OperationalError:
            await self.close()
            raise

    async def _upsert(self, records: list[IndexRecord]) -> int:
        if not records:
            return 0
        done = await upsert_documents(await self._connection(), records)
        self.rejected += done.refused
        return done.written + done.refused

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
