"""``verify`` (``spark_jobs.tlog_verify``) over a real Iceberg audit log made with pyiceberg in
the test PostgreSQL's catalog (no JVM): every tampering names its exact first bad seq, and a
run's tree checked from an earlier run's covers only the seqs between them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs import tlog_command, tlog_verify
from spark_jobs.tlog_store import TopicLog
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from tests.support import unique
from watch_service.protocol.tlog import note
from watch_service.protocol.tombstones import Tombstone
from watch_service.storage import Storage

pytestmark = pytest.mark.pg

SCHEMA = pa.schema(
    [pa.field("topic", pa.string(), False), pa.field("seq", pa.int64(), False),
     pa.field("ts", pa.int64(), False), pa.field("tag", pa.string()), pa.field("node", pa.string()),
     pa.field("meta", pa.string()), pa.field("data", pa.string(), False),
     pa.field("data_sha256", pa.string(), False), pa.field("origin", pa.string(), False)]
)  # fmt: skip


def row(topic: str, seq: int, data: str | None = None) -> dict:
    data = data or json.dumps({"n": seq})
    return {"topic": topic, "seq": seq, "ts": 1764144000000 + seq, "tag": None, "node": None,
            "meta": None, "data": data, "data_sha256": hashlib.sha256(data.encode()).hexdigest(),
            "origin": "delivered"}  # fmt: skip


@pytest.fixture
def house(pg_url: str, tmp_path: Path):
    layout = Layout("", str(tmp_path / "work"), "")
    catalog = readers.catalog(layout, pg_url)
    catalog.create_namespace("audit")
    location = Storage(layout.warehouse).uri("audit/audit_log")
    table = catalog.create_table("audit.audit_log", schema=SCHEMA, location=location)
    topic = unique("tv")
    table.append(pa.Table.from_pylist([row(topic, s) for s in range(1, 301) if s != 7], SCHEMA))
    signer = note.Signer.generate("auditsync.test/log")
    gaps = {topic: [Tombstone("ttl", 7, 7)]}
    tlog_command.publish(layout.work, pg_url, signer, run_id="r1", topics=[topic], gaps=gaps)
    table = readers.load(layout, pg_url, "audit_log")
    table.append(pa.Table.from_pylist([row(topic, s) for s in range(301, 601)], SCHEMA))
    tlog_command.publish(layout.work, pg_url, signer, run_id="r2", topics=[topic], gaps=gaps)
    log = TopicLog.at(Storage(layout.warehouse), topic, signer.verifier)
    return layout, topic, log


def check(house, pg_url: str, *runs: str | None) -> tlog_verify.Verified:
    layout, _, log = house
    table = readers.load(layout, pg_url, "audit_log")
    return tlog_verify.verify(log, table, table.current_snapshot().snapshot_id, *runs)


def rewrite(house, pg_url: str, change) -> None:
    """The whole table rewritten, with ``change`` applied to its rows."""
    layout = house[0]
    table = readers.load(layout, pg_url, "audit_log")
    rows = change(readers.scan(table).to_pylist())
    table.overwrite(pa.Table.from_pylist(rows, SCHEMA))


def test_the_log_verifies_and_between_runs_only_the_new_seqs(house, pg_url) -> None:
    found = check(house, pg_url)
    assert (found.start, found.checkpoint.size, found.since) == (0, 600, None)
    found = check(house, pg_url, "r1", "r2")
    assert (found.start, found.checkpoint.size, found.since.size) == (300, 600, 300)


@pytest.mark.parametrize(
    "change,seq,why",
    [
        (lambda rows: [{**r, "data": '{"n":0}'} if r["seq"] == 432 else r for r in rows], 432,
         "data_sha256 is not the SHA-256 of its data"),
        (lambda rows: [r | row(r["topic"], 432, '{"n":0}') if r["seq"] == 432 else r
                       for r in rows], 432, "the audit log's row is not the row that was signed"),
        (lambda rows: [{**r, "seq": 9999} if r["seq"] == 250 else r for r in rows], 250,
         "the audit log has no row of it; the signed log holds a record"),
        (lambda rows: [r for r in rows if r["seq"] != 5], 5,
         "the audit log has no row of it; the signed log holds a record"),
        (lambda rows: [*rows, row(rows[0]["topic"], 7)], 7,
         "the audit log's row is not the row that was signed"),  # a tombstone now has a row
        (lambda rows: [*rows, *[r for r in rows if r["seq"] == 11]], 11,
         "the audit log holds it twice"),
    ],
    ids=["payload", "whole-row", "seq-changed", "row-deleted", "row-added", "row-twice"],
)  # fmt: skip
def test_a_tampered_table_names_its_first_bad_seq(house, pg_url, change, seq, why) -> None:
    rewrite(house, pg_url, change)
    with pytest.raises(tlog_verify.VerifyFailure) as failed:
        check(house, pg_url)
    assert (failed.value.seq, str(failed.value)) == (
        seq, f"{house[1]}: seq {seq} differs from the signed log: {why}"
    )  # fmt: skip


def test_seqs_nobody_copied_are_uncopied_leaves_and_a_later_copy_rewrites_nothing(
    house, pg_url
) -> None:
    """The source holds 1..8; the audit log 1, 2, 5, 6 (3 and 4 were owed to no consumer):
    the tree grows past them, to 6 (7 and 8 are not judged yet), and verifies; a copy of 3
    that comes later is no rewrite of what was signed; a row deleted still fails."""
    import asyncio

    import psycopg

    from watch_service.protocol.requests import NewRecord, TopicConfig
    from watch_service.protocol.tlog import leaf
    from watch_service.store import topics as store

    layout = house[0]
    topic = unique("tu")

    async def source() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await store.put_topic(conn, topic, TopicConfig(None, None))
            new = [NewRecord(data=json.dumps({"n": i}), meta=None, tag=None, node=None)
                   for i in range(1, 9)]  # fmt: skip
            await store.append(conn, topic, new)

    asyncio.run(source())
    table = readers.load(layout, pg_url, "audit_log")
    table.append(pa.Table.from_pylist([row(topic, s) for s in (1, 2, 5, 6)], SCHEMA))
    signer = note.Signer.generate("auditsync.test/log")
    [p] = tlog_command.publish(layout.work, pg_url, signer, run_id="u1", topics=[topic])
    assert (p.old_size, p.checkpoint.size) == (0, 6)
    mine = TopicLog.at(Storage(layout.warehouse), topic, signer.verifier)
    assert mine.entries(6, 0)[2:4] == [leaf.uncopied(topic, 3), leaf.uncopied(topic, 4)]
    assert (
        leaf.uncopied(topic, 3)
        == f"auditsync.audit-log/v1 uncopied\ntopic {topic}\nseq 3\n".encode()
    )
    assert check((layout, topic, mine), pg_url).checkpoint.size == 6
    readers.load(layout, pg_url, "audit_log").append(pa.Table.from_pylist([row(topic, 3)], SCHEMA))
    assert check((layout, topic, mine), pg_url).start == 0
    rewrite(house, pg_url, lambda rows: [r for r in rows if (r["topic"], r["seq"]) != (topic, 5)])
    with pytest.raises(tlog_verify.VerifyFailure) as failed:
        check((layout, topic, mine), pg_url)
    assert str(failed.value) == (
        f"{topic}: seq 5 differs from the signed log: the audit log has no row of it; the signed "
        f"log holds a record"
    )
