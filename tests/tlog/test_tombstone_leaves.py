"""Tombstone leaves from a real source: a topic of the test PostgreSQL loses seqs to each of
its reasons (ttl, cap, a deletion and re-creation), the signed log holds a tombstone leaf at
exactly those seqs (a seq copied before the source gave it up stays a record, a seq the source
holds that nobody copied is uncopied), ``audit-log show --json`` prints the rows and the
tombstone ranges from which an auditor recomputes every leaf and the signed root, and Go's
``sumdb/tlog`` and ``transparency-dev/merkle`` (``tests/tlog/go``) verify the tiles, every
entry and the proofs of the tombstones."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from spark_jobs import tlog_command
from spark_jobs.tlog_store import TopicLog
from spark_jobs.warehouse.layout import Layout
from tests.tlog.house import audit_table, go_check, row
from watch_service import cli
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.protocol.tlog import leaf, merkle, note
from watch_service.storage import Storage
from watch_service.store import retention, topics

pytestmark = pytest.mark.pg

SIGNER = note.Signer.generate("auditsync.test/log")
COPIED = [5, 9, 11]  # the seqs the audit log holds


async def lose_seqs(db, name: str) -> None:
    """Seqs 1-4 go to ttl, 5-6 to the cap, 7-8 to a deletion; 9-11 are held."""

    def records(n: int) -> list[NewRecord]:
        return [NewRecord(json.dumps({"i": i}), None, None, None) for i in range(n)]

    await topics.put_topic(db, name, TopicConfig(None, 60_000))
    await topics.append(db, name, records(4))
    await retention.trim(db, name, now_ms=retention.current_ms() + 10**7)
    await topics.put_topic(db, name, TopicConfig(2, None))
    await topics.append(db, name, records(4))  # 5-8; the cap of 2 keeps 7-8
    await topics.delete_topic(db, name)
    await topics.put_topic(db, name, TopicConfig(None, None))  # re-created: 9 follows 8
    await topics.append(db, name, records(3))


@pytest.fixture
async def signed(db, pg_url: str, tmp_path: Path, topic_name: str):
    await lose_seqs(db, topic_name)
    cur = await db.execute(
        "SELECT gap_from, gap_to, reason FROM gaps WHERE topic = %s ORDER BY gap_from",
        (topic_name,),
    )
    assert await cur.fetchall() == [(1, 4, "ttl"), (5, 6, "cap"), (7, 8, "deleted")]
    layout = Layout("", str(tmp_path / "work"), "")
    audit_table(layout, pg_url, [row(topic_name, s) for s in COPIED])
    (done,) = tlog_command.publish(layout.work, pg_url, SIGNER, run_id="r1", topics=[topic_name])
    log = TopicLog.at(Storage(layout.warehouse), topic_name, SIGNER.verifier)
    return layout, topic_name, log, done


def test_each_reason_is_a_tombstone_leaf_at_its_exact_seqs(signed) -> None:
    _, name, log, done = signed
    assert (done.old_size, done.checkpoint.size) == (0, 11)
    assert log.entries(11, 0) == [
        *[leaf.tombstone(name, s, "ttl") for s in (1, 2, 3, 4)],
        leaf.record(row(name, 5)),  # copied before the cap took it
        leaf.tombstone(name, 6, "cap"),
        leaf.tombstone(name, 7, "recreated"),
        leaf.tombstone(name, 8, "recreated"),
        leaf.record(row(name, 9)),
        leaf.uncopied(name, 10),  # the source holds it; nobody copied it
        leaf.record(row(name, 11)),
    ]


def shown(capsys, layout: Layout, name: str, pg_url: str, *extra: str) -> list[dict]:
    argv = ["audit-log", "show", "--topic", name, "--work", layout.work, "--json"]
    assert cli.main([*argv, "--database-url", pg_url, *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def recomputed(name: str, size: int, printed: list[dict]) -> list[bytes]:
    """Every leaf of a tree of ``size``, from ``show --json``'s lines alone, as the docs say."""
    rows = {o["seq"]: o for o in printed if "leaf" not in o}
    reasons = {
        s: o["reason"] for o in printed if "leaf" in o for s in range(o["seq"], o["seq_to"] + 1)
    }

    def sha(value: str | None) -> str:
        import hashlib

        return "-" if value is None else hashlib.sha256(value.encode()).hexdigest()

    out = []
    for seq in range(1, size + 1):
        if seq in rows:
            r = rows[seq]
            text = (
                f"auditsync.audit-log/v1 record\ntopic {name}\nseq {seq}\nts {r['ts']}\n"
                f"data {sha(r['data'])}\nmeta {sha(r['meta'])}\ntag {sha(r['tag'])}\n"
                f"node {sha(r['node'])}\norigin {r['origin']}\n"
            )
        elif seq in reasons:
            text = f"auditsync.audit-log/v1 tombstone\ntopic {name}\nseq {seq}\nreason {reasons[seq]}\n"  # noqa: E501
        else:
            text = f"auditsync.audit-log/v1 uncopied\ntopic {name}\nseq {seq}\n"
        out.append(text.encode())
    return out


def test_show_json_prints_the_tombstones_and_recomputes_the_signed_root(
    signed, capsys, pg_url: str
) -> None:
    layout, name, _, done = signed
    printed = shown(capsys, layout, name, pg_url)
    assert [(o["seq"], o.get("seq_to"), o.get("reason")) for o in printed] == [
        (1, 4, "ttl"), (5, None, None), (6, 6, "cap"), (7, 8, "recreated"), (9, None, None),
        (11, None, None),
    ]  # fmt: skip
    assert printed[0] == {"topic": name, "seq": 1, "seq_to": 4, "leaf": "tombstone",
                          "reason": "ttl"}  # fmt: skip
    leaves = [merkle.leaf_hash(e) for e in recomputed(name, 11, printed)]
    assert merkle.root_of(leaves) == done.checkpoint.root
    # A page holds the tombstones between --after and its last row.
    page = shown(capsys, layout, name, pg_url, "--after", "5", "--limit", "1")
    assert [(o["seq"], o.get("seq_to"), o.get("reason")) for o in page] == [
        (6, 6, "cap"), (7, 8, "recreated"), (9, None, None)
    ]  # fmt: skip


def test_go_verifies_the_tombstone_leaves(signed, tlogcheck: Path) -> None:
    _, _, log, done = signed
    b64 = base64.b64encode
    request: dict = {
        "vkey": str(SIGNER.verifier),
        "checkpoints": [
            {"note": done.signed, "origin": log.origin, "tiles": str(log.storage.location.path)}
        ],
        "inclusions": [],
        "consistencies": [],
    }
    for seq in (1, 4, 6, 7, 8, 10):
        got = tlog_command.prove(log, seq, "r1")
        assert got.extra == log.entries(11, 0)[seq - 1]
        request["inclusions"].append(
            {
                "index": got.index,
                "size": 11,
                "leaf": b64(got.extra).decode(),
                "root": b64(done.checkpoint.root).decode(),
                "proof": [b64(h).decode() for h in got.path],
            }
        )
    answer = go_check(tlogcheck, request)
    assert answer == {"checkpoints": ["ok"], "inclusions": ["ok"] * 6, "consistencies": []}
