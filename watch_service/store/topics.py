"""The topic log in PostgreSQL: invariants L1 (gap-free, commit-ordered seqs) and L2 (loss is
recorded, never silent).

L1: an append takes the topic row's lock (``UPDATE topics SET head_seq = head_seq + n``) in the
same statement that inserts the records, so appends to one topic commit in seq order and a
reader that sees seq n sees every seq below it. L2: every removal (retention, deletion) writes
its ``gaps`` row and moves ``earliest_seq`` in the same transaction. Writes ``NOTIFY``
channel ``auditsync``, delivered at commit: ``"a <head_seq> <ts> <topic>"`` (an append),
``"r <head_seq> <ts> <earliest_seq> <n> <topic>\n<records>"`` (an append that carries its
records, when they fit), ``"t <earliest_seq> <topic>"`` (a trim), ``"d <head_seq> <topic>"``
(a deletion), ``"c 0 <topic>"`` (a creation).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import orjson
from psycopg import AsyncConnection

from watch_service.protocol.records import Record
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.protocol.tombstones import Tombstone, consumer_reason, missed_range
from watch_service.store.retention import CHANNEL, current_ms, record_gap, trim_locked

# A NOTIFY payload must stay under 8000 bytes: an append whose records fit carries them
# ("r ..."), so other processes' tailers take them without a read; a bigger one says only
# where the head is ("a ...").
NOTIFY_RECORDS_BYTES = 7000


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    name: str
    head_seq: int
    earliest_seq: int
    max_records: int | None
    ttl_ms: int | None
    created_at: dt.datetime

    def as_dict(self) -> dict:
        created = self.created_at.astimezone(dt.UTC)
        return {
            "topic": self.name,
            "head_seq": self.head_seq,
            "earliest_seq": self.earliest_seq,
            "max_records": self.max_records,
            "ttl_ms": self.ttl_ms,
            "created_at": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }


@dataclasses.dataclass(frozen=True)
class AppendResult:
    topic: str
    first_seq: int
    last_seq: int
    head_seq: int
    ts: int
    # The topic's retained start as the append saw it (a cap's trim right after it is told by
    # the trim's own NOTIFY).
    earliest_seq: int = 1


@dataclasses.dataclass(frozen=True)
class ReadResult:
    topic: str
    records: list[Record]
    from_seq: int
    to_seq: int
    head_seq: int
    earliest_seq: int
    tombstone: Tombstone | None


_TOPIC_COLS = "name, head_seq, earliest_seq, max_records, ttl_ms, created_at"

# The records travel as one text parameter: fields joined by \x1f, records by \x1e, NULL as
# ''. data and meta are compact JSON, where a control character is always escaped; a node is
# printable; an empty tag, node or meta is not valid. A tag holding a separator is the one
# case that cannot be split back: such a batch goes as four binary text arrays instead
# (psycopg's array dumper costs ~1 us a record in Python, the split ~0.1 us).
SEPARATED_ROWS = """(SELECT nullif(split_part(r, E'\\x1f', 1), '') AS tag,
               nullif(split_part(r, E'\\x1f', 2), '') AS node,
               nullif(split_part(r, E'\\x1f', 3), '') AS meta,
               split_part(r, E'\\x1f', 4) AS data, ord
          FROM string_to_table(%(records)s, E'\\x1e') WITH ORDINALITY AS s(r, ord)) AS u"""
ARRAY_ROWS = """unnest(%(tags)b::text[], %(nodes)b::text[], %(metas)b::text[], %(datas)b::text[])
              WITH ORDINALITY AS u(tag, node, meta, data, ord)"""
_APPEND = """
WITH h AS (
    UPDATE topics
       SET head_seq = head_seq + %(n)s,
           last_ts = greatest(last_ts, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
     WHERE name = %(topic)s AND deleted_at IS NULL
 RETURNING head_seq, last_ts, earliest_seq, max_records
), ins AS (
    INSERT INTO records (topic, seq, ts, tag, node, meta, data)
    SELECT %(topic)s, h.head_seq - %(n)s + u.ord, h.last_ts, u.tag, u.node,
           u.meta::json, u.data::json
      FROM h, {rows}
)
SELECT h.head_seq, h.last_ts, h.earliest_seq, h.max_records,
       pg_notify(%(channel)s, CASE
           WHEN %(notice)s::text IS NULL
           THEN 'a ' || h.head_seq || ' ' || h.last_ts || ' ' || %(topic)s
           ELSE 'r ' || h.head_seq || ' ' || h.last_ts || ' ' || h.earliest_seq || ' '
                || %(n)s || ' ' || %(topic)s || E'\\n' || %(notice)s::text
       END)
  FROM h
"""
_APPEND_SEPARATED = _APPEND.format(rows=SEPARATED_ROWS)
_APPEND_ARRAYS = _APPEND.format(rows=ARRAY_ROWS)

_READ = """
SELECT t.head_seq, t.earliest_seq, r.seq, r.ts, r.tag, r.node, r.meta::text, r.data::text
  FROM topics t
  LEFT JOIN LATERAL (
        SELECT seq, ts, tag, node, meta, data FROM records
         WHERE topic = t.name AND seq > %(from_seq)s
         ORDER BY seq LIMIT %(limit)s) r ON true
 WHERE t.name = %(topic)s AND t.deleted_at IS NULL
 ORDER BY r.seq
"""


def _topic(row) -> TopicInfo:
    return TopicInfo(*row)


async def get_topic(conn: AsyncConnection, name: str) -> TopicInfo | None:
    cur = await conn.execute(
        f"SELECT {_TOPIC_COLS} FROM topics WHERE name = %s AND deleted_at IS NULL", (name,)
    )
    row = await cur.fetchone()
    return _topic(row) if row else None


async def list_topics(conn: AsyncConnection) -> list[TopicInfo]:
    cur = await conn.execute(
        f"SELECT {_TOPIC_COLS} FROM topics WHERE deleted_at IS NULL ORDER BY name"
    )
    return [_topic(r) for r in await cur.fetchall()]


async def put_topic(conn: AsyncConnection, name: str, cfg: TopicConfig) -> tuple[TopicInfo, bool]:
    """Create, recreate (numbering continues after the old head) or update retention.

    Returns the topic and whether it was created. A tighter retention trims at once.
    """
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT deleted_at IS NOT NULL FROM topics WHERE name = %s FOR UPDATE", (name,)
        )
        row = await cur.fetchone()
        if row is None:
            await conn.execute(
                "INSERT INTO topics (name, max_records, ttl_ms) VALUES (%s, %s, %s)",
                (name, cfg.max_records, cfg.ttl_ms),
            )
            created = True
        else:
            created = row[0]
            await conn.execute(
                """UPDATE topics SET max_records = %s, ttl_ms = %s, deleted_at = NULL,
                          created_at = CASE WHEN deleted_at IS NULL THEN created_at ELSE now() END
                    WHERE name = %s""",
                (cfg.max_records, cfg.ttl_ms, name),
            )
        if created:
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"c 0 {name}"))
        await trim_locked(conn, name, current_ms())
        topic = await get_topic(conn, name)
    assert topic is not None
    return topic, created


async def delete_topic(conn: AsyncConnection, name: str) -> int | None:
    """Delete a topic's records (recording the gap); returns its head_seq, None if unknown."""
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT head_seq, earliest_seq FROM topics WHERE name = %s AND deleted_at IS NULL "
            "FOR UPDATE",
            (name,),
        )
        row = await cur.fetchone()
        if row is None:
            return None
        head, earliest = row
        await conn.execute("DELETE FROM records WHERE topic = %s", (name,))
        if earliest <= head:
            await record_gap(conn, name, earliest, head, "deleted")
        await conn.execute(
            "UPDATE topics SET deleted_at = now(), earliest_seq = head_seq + 1 WHERE name = %s",
            (name,),
        )
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"d {head} {name}"))
    return head


async def append(conn: AsyncConnection, name: str, records: list[NewRecord]) -> AppendResult | None:
    """Append a batch atomically with consecutive seqs; None if the topic does not exist.

    One statement in autocommit: the batch is all there or not at all. A capped topic over its
    cap is trimmed right after, in its own transaction.
    """
    params = {
        "channel": CHANNEL,
        "topic": name,
        "n": len(records),
        "notice": notify_rows(records),
    }
    statement = _APPEND_SEPARATED
    text = "\x1e".join(
        [f"{r.tag or ''}\x1f{r.node or ''}\x1f{r.meta or ''}\x1f{r.data}" for r in records]
    )
    if text.count("\x1f") == 3 * len(records) and text.count("\x1e") == len(records) - 1:
        params["records"] = text
    else:  # a tag holds a separator
        # NewRecord is a tuple (data, meta, tag, node): one zip gives the four column arrays.
        datas, metas, tags, nodes = (list(c) for c in zip(*records, strict=True))
        params.update(tags=tags, nodes=nodes, metas=metas, datas=datas)
        statement = _APPEND_ARRAYS
    cur = await conn.execute(statement, params)
    row = await cur.fetchone()
    if row is None:
        return None
    head, ts, earliest, max_records = row[:4]
    if max_records is not None and head - earliest + 1 > max_records:
        async with conn.transaction():
            await trim_locked(conn, name, current_ms(), lock=True)
    return AppendResult(name, head - len(records) + 1, head, head, ts, earliest)


def notify_rows(records: list[NewRecord]) -> str | None:
    """The records as the append's NOTIFY carries them (``[[data, meta, tag, node], ...]``,
    each text as sent), or None when they would not fit."""
    size = 0
    for r in records:
        size += len(r.data) + len(r.meta or "") + len(r.tag or "") + len(r.node or "") + 16
        if size > NOTIFY_RECORDS_BYTES:
            return None
    rows = orjson.dumps([tuple(r) for r in records])
    return rows.decode() if len(rows) <= NOTIFY_RECORDS_BYTES else None


def parse_notice(payload: str) -> tuple[AppendResult, list[NewRecord]]:
    """An "r" NOTIFY payload as the append's result and records."""
    header, rows = payload.split("\n", 1)
    _, head, ts, earliest, n, topic = header.split(" ", 5)
    last, count = int(head), int(n)
    result = AppendResult(topic, last - count + 1, last, last, int(ts), int(earliest))
    return result, [NewRecord(*row) for row in orjson.loads(rows)]


async def read(conn: AsyncConnection, name: str, from_seq: int, limit: int) -> ReadResult | None:
    """Records with seq > from_seq (one snapshot), plus the tombstone for any trimmed range."""
    cur = await conn.execute(_READ, {"topic": name, "from_seq": from_seq, "limit": limit})
    rows = await cur.fetchall()
    if not rows:
        return None
    head, earliest = rows[0][0], rows[0][1]
    records = [Record(*r[2:]) for r in rows if r[2] is not None]
    tombstone = None
    missed = missed_range(from_seq, earliest)
    if missed is not None:
        tombstone = Tombstone(await gap_reason(conn, name, *missed), *missed)
    to_seq = records[-1].seq if records else max(from_seq, earliest - 1)
    return ReadResult(name, records, from_seq, to_seq, head, earliest, tombstone)


async def gap_reason(conn: AsyncConnection, name: str, gap_from: int, gap_to: int) -> str:
    cur = await conn.execute(
        "SELECT DISTINCT reason FROM gaps WHERE topic = %s AND gap_to >= %s AND gap_from <= %s",
        (name, gap_from, gap_to),
    )
    return consumer_reason(r for (r,) in await cur.fetchall())
