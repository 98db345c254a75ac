"""The failover drill: PostgreSQL fails over to an asynchronous replica that lagged, and the
pipeline finds every copy the consumers hold that the new source contradicts.

Two clusters of our own on loopback: a primary and a hot standby cloned from it by
``pg_basebackup -R`` (``watch_service.tools.standby``). The service (``auditsync serve``, its
own process) runs on the primary; two sinks land two topics, one of them with fault injection
(drops and corruptions); four writers append in batches.

1. ``KEPT`` records per topic are written and landed; the standby replays all of it.
2. The standby stops receiving WAL. Writers append up to ``LOST`` per topic; the primary
   acknowledges them, both sinks land them. One pipeline run, the source on the primary,
   judges 1..``LOST`` and signs each topic's audit log at ``LOST`` (with a signing key).
3. The primary's postmaster is killed (SIGKILL), the standby promoted: its heads are ``KEPT``.
   The service is restarted on the new primary, on the same port. The sinks, connected across
   it, reconnect by themselves, present their ``Last-Event-ID`` (``LOST``) and land the
   stream's ``rewound`` frames (``KEPT + 1 .. LOST``).
4. Writers go on: ``KEPT + 1 .. AFTER`` again, with new content.
5. One pipeline run, the source on the new primary. Expected, derived seq by seq from what each sink
   landed and what the new primary holds: every copy that differs from the source is found
   (``divergent`` beside a matching copy, ``mismatch`` without one), every missing seq is a
   ``silent_gap``, the rewind is reported (``source_rewound``, the exact lost ranges), the
   counts are exact, backfill repairs everything and verify passes. The signed audit log
   forks: each topic's new log breaks at ``KEPT + 1`` from the one the run before signed; the
   run records the break with both checkpoints (printed), and every seq before it proves into
   both logs.

Where the pipeline's own state lives: in a database of its own (the production layout,
``AUDITSYNC_PIPELINE_DATABASE_URL``), here on the test session's cluster, apart from both the
primary and the standby. The failover takes the source back; the run before it stays whole:
its row, its verdicts, its digests, its catalog pointers and so its time travel. The run after
it is judged on the same warehouse, and knows the rewind two ways: the consumers' ``rewound``
frames, and the digests of what the run before judged, which no longer hash as judged. The
drill prints what the source lost and what the pipeline still knows.

The sinks' session cursors are flushed at ``KEPT`` before the standby's replay is awaited:
with an older session row the stream resumes from it after the failover and re-delivers what
the sinks hold (counted as ``duplicate``, which ``expected_verdicts`` would follow too), so
the drill's counts depend on the fault seed alone.

Not covered here: a sink that was not connected across the failover and never comes back (its
copies above the new head are ``phantom`` until the head passes them, see
``test_rewind.py``), the search index (``tests/sink/test_sink_rewound.py``), writers still in
flight when the primary dies (they pause at the kill, so the lost seqs are known exactly).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import psycopg
import pytest

from spark_jobs import runner
from spark_jobs.common import statuses as st
from spark_jobs.tlog_store import TopicLog
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.tlog import note
from watch_service.sink.faults import FaultPolicy
from watch_service.storage import Storage
from watch_service.store import runs
from watch_service.store.cluster import EmbeddedPostgres
from watch_service.store.migrate import migrate
from watch_service.tools import standby as sb

from ..restore import RestorableDatabase
from ..sink import harness as lv
from ..support import ServiceProcess, free_port, unique, wait_for
from . import places

pytestmark = [
    pytest.mark.spark,
    pytest.mark.e2e,
    pytest.mark.timeout(1200),  # two pipeline runs now; a bound against a hang on a loaded machine
]

# Heads per topic: replicated; acknowledged by the primary, then lost; after the failover.
KEPT, LOST, AFTER = 120, 200, 260
BATCH, WRITERS = 5, 4
SOURCE_HASHES = """SELECT topic, seq, encode(sha256(convert_to(data::text, 'UTF8')), 'hex')
                     FROM records WHERE topic = ANY(%s)"""


@dataclasses.dataclass
class Clusters:
    primary: EmbeddedPostgres
    standby: sb.Standby


@pytest.fixture
def services():
    """Start ``auditsync serve`` processes; each is stopped by its PID after the test."""
    started: list[ServiceProcess] = []

    async def start(db_url: str, port: int, log: Path) -> ServiceProcess:
        started.append(ServiceProcess(db_url, port, log_path=log))
        return await asyncio.to_thread(started[-1].start)

    yield start
    for svc in started:
        svc.stop()


@pytest.fixture
def pipeline_db(pg_url, tmp_path):
    """The pipeline's own database, on the session's cluster: neither primary nor standby."""
    db = RestorableDatabase(pg_url, unique("failover_pipeline").replace("-", "_"), tmp_path)
    yield db.create().url
    db.drop()


@pytest.fixture
def clusters():
    """A primary and its hot standby, each in its own folder the server's user can reach."""
    base = Path(tempfile.mkdtemp(prefix="auditsync-failover-"))
    base.chmod(0o755)
    primary = EmbeddedPostgres(base / "primary", free_port())
    standby = None
    try:
        primary.start()
        migrate(primary.url)
        standby = sb.Standby.clone(primary, base / "standby", free_port())
        yield Clusters(primary, standby)
    finally:
        if standby is not None:
            standby.stop()
        primary.stop()
        shutil.rmtree(base, ignore_errors=True)


async def write(http, url: str, topics: list[str], first: int, last: int, phase: str) -> None:
    """Seqs ``first..last`` of every topic, in batches of ``BATCH`` by ``WRITERS`` concurrent
    writers, each batch acknowledged with ``BATCH`` consecutive seqs; the content names the
    phase, so a seq written again differs from its lost copy."""
    jobs = asyncio.Queue()
    for start in range(first, last + 1, BATCH):
        for topic in topics:
            jobs.put_nowait((topic, start))

    async def writer(w: int) -> None:
        while not jobs.empty():
            topic, start = jobs.get_nowait()
            body = {
                "records": [
                    {"data": {"phase": phase, "writer": w, "at": start, "i": i}}
                    for i in range(BATCH)
                ]
            }
            async with http.post(f"{url}/v0/topics/{topic}/records", json=body) as r:
                assert r.status == 200, await r.text()
                ack = await r.json()
            assert ack["last_seq"] - ack["first_seq"] == BATCH - 1

    # Batches of one topic commit in any order among the writers: the heads say all landed.
    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    for topic in topics:
        async with http.get(f"{url}/v0/topics/{topic}") as r:
            assert (await r.json())["head_seq"] == last


def landed_through(cfg, topics: list[str], seq: int):
    return lambda: lv.state(cfg).get("cursors") == dict.fromkeys(topics, seq)


def session_at(url: str, cfg, topics: list[str], seq: int):
    """The sink's session row holds ``seq`` for every topic (the flusher writes behind): the
    standby then resumes the stream from the head, so the drill's re-deliveries are exact."""

    async def check() -> bool:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
            cur = await db.execute(
                "SELECT cursors FROM watch_sessions WHERE wid = %s", (lv.state(cfg)["wid"],)
            )
            row = await cur.fetchone()
        return row is not None and row[0] == dict.fromkeys(topics, seq)

    return check


def expected_verdicts(rows: list[dict], source: dict[tuple[str, int], str], topics, consumer):
    """Net summary counts per (consumer, topic, status), judged seq by seq: each source seq
    against the hashes of the copies the sink landed."""
    copies: dict[tuple[str, int], list[str]] = {}
    for r in rows:
        if r["kind"] == "record":
            copies.setdefault((r["topic"], r["seq"]), []).append(r["data_sha256"])
    out: Counter = Counter()
    for (topic, seq), want in source.items():
        got = copies.get((topic, seq), [])
        matching = sum(h == want for h in got)
        if not got:
            status = st.SILENT_GAP
        elif matching == len(got):
            status = st.DELIVERED
            out[(consumer, topic, st.DUPLICATE)] += len(got) - 1
        elif matching:
            status = st.DIVERGENT
        else:
            status = st.MISMATCH
        out[(consumer, topic, status)] += 1
    for topic in topics:
        out[(consumer, topic, st.SOURCE_REWOUND)] = LOST - KEPT
    return {k: n for k, n in out.items() if n}


async def test_a_failover_to_a_lagging_replica_is_found_and_repaired(
    clusters, pipeline_db, services, spark, tmp_path, monkeypatch
):
    started = time.monotonic()
    signer = note.Signer.generate("auditsync.test/failover")
    monkeypatch.setenv("AUDITSYNC_LOG_SIGNING_KEY", str(signer))
    topics = ["orders", "payments"]  # fresh clusters: fixed names, so the faults are fixed
    port = free_port()
    landing, work = tmp_path / "landing", str(tmp_path / "work")
    service = await services(clusters.primary.url, port, tmp_path / "primary.log")
    steady = lv.config(landing, service.url, topics=tuple(topics), consumer="steady")
    faulty = dataclasses.replace(
        steady, consumer="faulty", faults=FaultPolicy(drop_fraction=0.04, corrupt=4, seed=22)
    )
    async with aiohttp.ClientSession() as http:
        for topic in topics:
            async with http.put(f"{service.url}/v0/topics/{topic}", json={}) as r:
                assert r.status == 201
        async with lv.running(steady) as run_s, lv.running(faulty) as run_f:
            await write(http, service.url, topics, 1, KEPT, "kept")
            for cfg in (steady, faulty):
                await wait_for(landed_through(cfg, topics, KEPT), 20, f"{cfg.consumer} at KEPT")
                await wait_for(
                    session_at(clusters.primary.url, cfg, topics, KEPT),
                    20,
                    f"{cfg.consumer}'s session cursors flushed at KEPT",
                )
            await asyncio.to_thread(clusters.standby.wait_replayed, clusters.primary)
            await asyncio.to_thread(clusters.standby.hold_back)

            await write(http, service.url, topics, KEPT + 1, LOST, "lost")
            for cfg in (steady, faulty):
                await wait_for(landed_through(cfg, topics, LOST), 20, f"{cfg.consumer} at LOST")
            # A run judges 1..LOST on the primary and signs each topic's audit log at LOST.
            before = Layout(str(landing), work, unique("fo"))
            first = await asyncio.to_thread(
                runner.run_steps, spark, before, clusters.primary.url, 2, pipeline_url=pipeline_db
            )
            with psycopg.connect(pipeline_db, autocommit=True) as conn:
                known = (runs.get_run(conn, before.run_id), runs.run_summary(conn, before.run_id))
            at = Storage(Layout("", work, "").warehouse)
            signed = {t: TopicLog.at(at, t, signer.verifier) for t in topics}
            old = {t: signed[t].latest() for t in topics}
            assert {t: o[0].size for t, o in old.items() if o} == dict.fromkeys(topics, LOST)

            await asyncio.to_thread(sb.kill, clusters.primary)
            await asyncio.to_thread(clusters.standby.promote)
            await asyncio.to_thread(service.stop)
            service = await services(clusters.standby.url, port, tmp_path / "new.log")
            for topic in topics:
                async with http.get(f"{service.url}/v0/topics/{topic}") as r:
                    assert (await r.json())["head_seq"] == KEPT
            for cfg in (steady, faulty):
                await wait_for(landed_through(cfg, topics, KEPT), 20, f"{cfg.consumer} rewound")

            await write(http, service.url, topics, KEPT + 1, AFTER, "after")
            for cfg in (steady, faulty):
                await wait_for(landed_through(cfg, topics, AFTER), 20, f"{cfg.consumer} at AFTER")
            await run_s.stop()
            await run_f.stop()
        await asyncio.to_thread(service.stop)
    served = time.monotonic() - started

    url = clusters.standby.url
    for cfg in (steady, faulty):
        rewound = sorted(
            (r["topic"], r["reason"], r["gap_from"], r["gap_to"], r["head_seq"], r["cursor"])
            for r in lv.rows(cfg)
            if r["kind"] == "rewound"
        )
        assert rewound == sorted(
            (t, "source_rewound", KEPT + 1, LOST, KEPT, KEPT) for t in topics
        ), cfg.consumer

    after = Layout(str(landing), work, unique("fo"))
    figures = runner.run_steps(spark, after, url, partitions=2, pipeline_url=pipeline_db)
    with psycopg.connect(url, autocommit=True) as conn:
        source = {(t, s): h for t, s, h in conn.execute(SOURCE_HASHES, (topics,)).fetchall()}
        heads = runs.source_heads(conn, topics)
    with psycopg.connect(pipeline_db, autocommit=True) as conn:
        net = runs.cumulative_summary(conn, Layout("", work, "").catalog)
        still = (runs.get_run(conn, before.run_id), runs.run_summary(conn, before.run_id))
    report(before.run_id, known, still, heads, figures["reconcile"])
    assert still == known and known[0][0] == "passed"
    assert heads == dict.fromkeys(topics, AFTER)
    assert sorted(source) == [(t, s) for t in sorted(topics) for s in range(1, AFTER + 1)]
    expected = {
        **expected_verdicts(lv.rows(steady), source, topics, "steady"),
        **expected_verdicts(lv.rows(faulty), source, topics, "faulty"),
    }
    print(f"[failover] served {served:.1f} s, total {time.monotonic() - started:.1f} s")
    assert net == expected
    lost = LOST - KEPT
    for t in topics:  # the faithful sink: every lost seq it held is a divergent copy
        assert {s: n for (c, tt, s), n in net.items() if (c, tt) == ("steady", t)} == {
            st.DELIVERED: AFTER - lost,
            st.DIVERGENT: lost,
            st.SOURCE_REWOUND: lost,
        }
    faulty_kinds = {s for (c, _, s), n in net.items() if c == "faulty"}
    assert {st.SILENT_GAP, st.MISMATCH, st.DIVERGENT} <= faulty_kinds
    rec = figures["reconcile"]
    assert rec["rewound"] == {t: [[KEPT + 1, LOST]] for t in topics}
    defects = sum(n for k, n in expected.items() if k[2] in st.DEFECTS)
    # The run before judged 1..LOST (the faulty sink's defects there, repaired then); the run
    # after the rest, the lost range judged again: together, every defect, each repaired.
    found = (first["verify"]["found"], figures["verify"]["found"])
    assert sum(found) == defects and first["verify"]["passed"] and figures["verify"]["passed"]
    log = {
        (t, int(s)): h
        for t, s, h in places.audit_rows(
            Layout("", work, ""), pipeline_db, ("topic", "seq", "data_sha256")
        )
    }
    assert log == source
    check_the_fork(pipeline_db, after, signed, old, topics)


def report(before: str, known: tuple, still: tuple, heads: dict, reconcile: dict) -> None:
    """What the source lost and what the pipeline still knows, as the drill's output says."""
    row, summary = still
    judged = sum(n for _, _, status, n, *_ in summary if status not in st.EVENT_STATUSES)
    print(
        f"[failover] the source lost seqs {KEPT + 1}-{LOST} of every topic (acknowledged, "
        f"never replicated); its heads went {LOST} -> {KEPT}, then {heads} after the writers"
    )
    print(
        f"[failover] the pipeline still knows run {before}: {row[0]}, {judged} seqs judged "
        f"({'unchanged' if still == known else 'CHANGED'} since before the failover), its "
        f"digests and its time travel; the run after found source_rewound {reconcile['rewound']}"
    )


def check_the_fork(url: str, after: Layout, signed: dict, old: dict, topics) -> None:
    """The run after the failover forked each topic's signed log at KEPT + 1: the break holds
    the old checkpoint (the run before, on storage and in the pipeline's database) and the new
    one; every seq before the rewound range proves into both, as the audit log holds it."""
    from spark_jobs.tlog_command import prove
    from watch_service.protocol.tlog import leaf
    from watch_service.store import tlog_runs

    with psycopg.connect(url) as conn:
        run_log = tlog_runs.run_log(conn, after.run_id)
    assert run_log is not None
    status, checkpoints = run_log
    audit = readers.audit_log(Layout("", after.work, ""), url).to_pylist()
    rows = {(r["topic"], r["seq"]): r for r in audit}
    for t in topics:
        new = TopicLog.at(Storage(after.warehouse), t, signed[t].verifier)
        assert new.epoch == 1 and new.latest()[0].size == AFTER
        fork = checkpoints[t]["fork"]
        assert fork == {
            "topic": t, "epoch": 1, "seq": KEPT + 1, "range": [[KEPT + 1, LOST]],
            "reason": "source_rewound", "run_id": after.run_id, "old": old[t][1],
            "new": new.latest()[1],
        }  # fmt: skip
        print(
            f"[failover] {t}: the break at seq {fork['seq']} ({fork['reason']}, range "
            f"{fork['range']}, run {fork['run_id']})\nold checkpoint\n{fork['old']}"
            f"new checkpoint\n{fork['new']}"
        )
        for seq in range(1, KEPT + 1):
            entry = leaf.record(rows[(t, seq)])
            assert prove(new, seq).verify(entry, new.verifier, new.origin) == AFTER
            assert prove(new.at_epoch(0), seq).verify(entry, new.verifier, new.origin) == LOST
    assert status == "signed"
