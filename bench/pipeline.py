"""What a pipeline run costs as history grows, and the fixed cost of an empty DAG run.

Starts its own throwaway PostgreSQL (the project's embedded cluster, a temp folder, a free
loopback port) and one local Spark session, then:

* an untimed warm-up run that delivers ``--warm`` records (default 2,000), so the JVM has run
  every step's Spark jobs before the first timed run, on any commit: an empty run may run none;
* for each history size (default 0, 1 M and 5 M records in 4 topics, cumulative): writes the
  missing history directly — source rows with COPY into ``records``, the landing zone as sink
  segments written with pyarrow (``part-<first>-<last>.parquet``, 500-record frames) — and
  reconciles it with one untimed pipeline run; then adds 2,000 new records the same way and
  times one more run, step by step (``spark_jobs.runner.run_steps``, in-process);
* the fixed cost of an empty run: the same in-process run with nothing new, and
  ``airflow dags test audit_sync`` on an empty landing zone (sensor marked done), with the Spark
  steps on a Spark Connect server (``auditsync spark-connect``) and as one ``spark-submit``
  each, interleaved so both see the same machine load (medians of ``--dag-runs``).

* the signed audit log's own costs, without Spark (``tlog_costs``): ``audit-log prove`` on a
  tree of ``--tlog-leaves`` leaves (default 5 M), a run's own log work over that tree with
  2,000 new audit-log rows (``tlog_run.check_and_publish``), and ``audit-log verify --from
  --to`` between runs a tenth and a hundredth of ``--tlog-rows`` (default 200,000) leaves
  apart; every timed
  run above signs too (a generated key), and its ``log`` figure is verify's check, growth and
  signature of the signed log (target: at most 5 % of the run).

Prints per-step seconds, the ratio of each run to the run over an empty history (target: 5 M
within 1.2 x) and of the Spark Connect DAG run to the spark-submit one (target: at most half),
and the load average before and after. Not a test: it reports, it does not assert.
Measured here (2 cores shared with other work, load average 2-5.5), with the incremental
pipeline: empty DAG run 40.4 / 30.9 s on Spark Connect against 109.9 / 102.9 s with a
spark-submit per step (medians 35.6 vs 106.4 s, 0.34x; the full-rebuild pipeline's empty DAG run
was 130.5 s at load 4); +2,000 records over 0 / 1 M / 5 M of history 31.3 / 19.6 / 11.6 s (the
first run pays the JVM's warm-up), 5 M / 0 = 0.37x.
``python bench/pipeline.py [--sizes 0,1000000,5000000] [--new 2000] [--dag-runs 2]
[--warm N] [--skip-dag] [--dag-only] [--connect-only] [--quick] [--tlog-only] [--tlog-leaves N]
[--tlog-rows N] [--index] [--baseline CHECKOUT]`` (``--dag-only``: only the empty DAG runs;
``--baseline``: another set-up checkout's empty DAG runs interleaved with these, the before of a
before/after; ``--connect-only``: only
their Spark Connect runs, each printed with its tasks' seconds, the Spark Connect server's
CPU-seconds during each task and the ``airflow dags test`` process's CPU-seconds; ``--quick``:
sizes 0,100000, one DAG run each; ``--index``: the consumer keeps the search index, a
document per record, and each run's index verify is timed; its histories are seeded in bulk as
already verified (``World.seed``: ``generate_series`` in PostgreSQL, a few minutes for 5 M)
instead of reconciled by an untimed run, which took over 13 minutes at 5 M).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime as dt
import hashlib
import os
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import pyarrow as pa  # noqa: E402
from _proc import cpu_s  # noqa: E402 (bench/)

from spark_jobs.warehouse.layout import STEPS, Layout  # noqa: E402
from watch_service.protocol.tlog.note import Signer  # noqa: E402
from watch_service.settings import Settings  # noqa: E402
from watch_service.sink.landing import SCHEMA, segment_name  # noqa: E402
from watch_service.store.cluster import EmbeddedPostgres  # noqa: E402
from watch_service.store.migrate import migrate  # noqa: E402
from watch_service.store.runs import DIGEST_BUCKET, RANGE_DIGEST  # noqa: E402
from watch_service.tools import spark_connect  # noqa: E402
from watch_service.tools.airflow_env import airflow_env  # noqa: E402
from watch_service.tools.local import free_port  # noqa: E402

TOPIC_COUNT = 4
CONSUMER = "bench"
FRAME = 500
FRAMES_PER_SEGMENT = 100
TS0 = 1_700_000_000_000
NEW_ROWS = 2_000  # a run's new records, as the cost target counts them
# One record per millisecond per topic: 5 M records land on ONE day of the audit log, the
# costliest shape for a pipeline whose cost would follow the day (issue 24); a new interval's
# records land in that day too.
TS_STEP_MS = 1
BIN = Path(sys.executable).parent
BASELINE = "baseline"
BUCKET = DIGEST_BUCKET  # a digest's range lies in one block of seqs
# A seeded history (``World.seed``): one committed run that read no batch ...
SEED_RUN = [
    """INSERT INTO pipeline_runs (run_id, warehouse, status, finished_at, defects_found,
                                  defects_remaining)
       VALUES (%(run_id)s, %(wh)s, 'passed', now(), 0, 0)""",
    """INSERT INTO reconcile_runs (run_id, warehouse, batch_from, batch_to)
       VALUES (%(run_id)s, %(wh)s, %(batch)s + 1, %(batch)s)""",
]
# ... and per topic, seqs (lo, hi]: the records ``World._chunk`` writes, their documents, the
# run's window and verdicts, and its digests (one per BUCKET-aligned block, over the seqs).
SEED_TOPIC = [
    """INSERT INTO records (topic, seq, ts, data)
       SELECT %(t)s, g, %(ts0)s + g * %(step)s,
              format('{"i":%%s,"topic":"%%s","v":"%%s"}', g, %(t)s::text,
                     lpad(to_hex((g * 2654435761) %% 4294967296), 8, '0'))::json
         FROM generate_series(%(lo)s + 1, %(hi)s) g""",
    """INSERT INTO search_documents (doc_key, topic, seq, ts, data)
       SELECT topic || '/' || seq, topic, seq, ts, data::jsonb FROM records
        WHERE topic = %(t)s AND seq > %(lo)s AND seq <= %(hi)s""",
    """UPDATE topics SET head_seq = %(hi)s, last_ts = %(ts0)s + %(hi)s * %(step)s
        WHERE name = %(t)s""",
    """INSERT INTO reconcile_windows (run_id, consumer, topic, start_seq, seq_from, seq_to)
       VALUES (%(run_id)s, %(consumer)s, %(t)s, 0, %(lo)s, %(hi)s)""",
    """INSERT INTO reconcile_summary (run_id, consumer, topic, status, count)
       VALUES (%(run_id)s, %(consumer)s, %(t)s, 'delivered', %(hi)s - %(lo)s)""",
    f"""INSERT INTO reconcile_digests (warehouse, topic, seq_from, seq_to, digest, run_id)
        SELECT %(wh)s, %(t)s, min(r.seq), max(r.seq), {RANGE_DIGEST}, %(run_id)s
          FROM records r WHERE r.topic = %(t)s AND r.seq > %(lo)s AND r.seq <= %(hi)s
         GROUP BY r.seq / %(bucket)s""",
]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


class World:
    """The source (PostgreSQL) and one consumer's landing zone, grown together."""

    def __init__(self, url: str, landing: str, prefix: str, index: bool = False) -> None:
        from watch_service.storage import Storage

        self.index = index  # the sink's search index too: every record a document, its mark
        self.topics = tuple(f"{prefix}-{i}" for i in range(TOPIC_COUNT))
        self.url = url
        self.landing = landing
        self.store = Storage.at(landing).child(CONSUMER)
        self.heads = dict.fromkeys(self.topics, 0)
        self.frame_no = 0
        self.folder = ""  # the landing folder new segments go to ("": the root)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE records SET UNLOGGED")  # a throwaway cluster: speed only
            conn.execute(
                "INSERT INTO topics (name) SELECT unnest(%s::text[])", (list(self.topics),)
            )

    @property
    def total(self) -> int:
        return sum(self.heads.values())

    def add(self, count: int) -> float:
        """``count`` new records spread over the topics, in the source and the landing zone."""
        started = time.monotonic()
        n_topics = len(self.topics)
        per_topic = [count // n_topics + (i < count % n_topics) for i in range(n_topics)]
        with psycopg.connect(self.url) as conn:
            conn.execute("SET synchronous_commit = off")
            for topic, n in zip(self.topics, per_topic):
                first = self.heads[topic] + 1
                for lo in range(first, first + n, FRAME * FRAMES_PER_SEGMENT):
                    hi = min(lo + FRAME * FRAMES_PER_SEGMENT, first + n) - 1
                    self._chunk(conn, topic, lo, hi)
                self.heads[topic] += n
                conn.execute(
                    "UPDATE topics SET head_seq = %s, last_ts = %s WHERE name = %s",
                    (self.heads[topic], TS0 + self.heads[topic] * TS_STEP_MS, topic),
                )
            if self.index:
                conn.execute(
                    "INSERT INTO search_index_marks (consumer, frame_no) VALUES (%s, %s) "
                    "ON CONFLICT (consumer) DO UPDATE SET frame_no = excluded.frame_no",
                    (CONSUMER, self.frame_no),
                )
        return time.monotonic() - started

    def seed(self, count: int, warehouse: str, run_id: str) -> float:
        """``count`` records of verified history in bulk (``--index``): the source's records
        and search documents by ``generate_series`` (the same rows ``add`` writes), and the
        pipeline's memory of one committed run that judged them all, as ``bench/year.py``
        seeds its year: its ``pipeline_runs``, ``reconcile_runs``, ``reconcile_windows`` and
        ``reconcile_summary`` rows, and the range digests the run would have stored. A run
        after it continues from that window, its index verify's slice reads that history. The
        history's landing segments and Iceberg rows are not written: compact lists only the
        folders written since its last segment, and every later step reads the run's seqs
        only, so they cost a later run nothing."""
        started = time.monotonic()
        n_topics = len(self.topics)
        per_topic = [count // n_topics + (i < count % n_topics) for i in range(n_topics)]
        spans = {t: (self.heads[t], self.heads[t] + n) for t, n in zip(self.topics, per_topic)}
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            conn.execute("SET maintenance_work_mem = '256MB'")
            conn.execute("ALTER TABLE search_documents SET UNLOGGED")
            conn.execute("DROP INDEX search_documents_body")  # built once at the end: faster
            [(last,)] = conn.execute(
                "SELECT coalesce(max(batch_to), 0) FROM reconcile_runs WHERE warehouse = %s",
                (warehouse,),
            ).fetchall()
            for statement in SEED_RUN:
                conn.execute(statement, {"run_id": run_id, "wh": warehouse, "batch": last})
            for topic, (lo, hi) in spans.items():
                key = {"t": topic, "lo": lo, "hi": hi, "wh": warehouse, "run_id": run_id}
                key |= {"ts0": TS0, "step": TS_STEP_MS, "consumer": CONSUMER, "bucket": BUCKET}
                for statement in SEED_TOPIC:
                    conn.execute(statement, key)
                self.heads[topic] = hi
            conn.execute("CREATE INDEX search_documents_body ON search_documents USING gin (body)")
            conn.execute("ANALYZE")
        return time.monotonic() - started

    def _chunk(self, conn, topic: str, lo: int, hi: int) -> None:
        seqs = list(range(lo, hi + 1))
        data = [f'{{"i":{s},"topic":"{topic}","v":"{(s * 2654435761) % 2**32:08x}"}}' for s in seqs]
        with conn.cursor().copy("COPY records (topic, seq, ts, data) FROM STDIN") as copy:
            for s, d in zip(seqs, data):
                copy.write_row((topic, s, TS0 + s * TS_STEP_MS, d))
        if self.index:
            columns = "doc_key, topic, seq, ts, data"
            with conn.cursor().copy(f"COPY search_documents ({columns}) FROM STDIN") as copy:
                for s, d in zip(seqs, data):
                    copy.write_row((f"{topic}/{s}", topic, s, TS0 + s * TS_STEP_MS, d))
        frames = [(s - lo) // FRAME for s in seqs]
        first_frame = self.frame_no + 1
        frame_nos = [first_frame + f for f in frames]
        cursors = [min(lo + (f + 1) * FRAME - 1, hi) for f in frames]
        self.frame_no = frame_nos[-1]
        n = len(seqs)
        now = int(time.time() * 1000)
        table = pa.table(
            {
                "consumer": [CONSUMER] * n,
                "filter_node": pa.nulls(n, pa.string()),
                "frame_no": frame_nos,
                "frame_id": [f"{topic}:{c}" for c in cursors],
                "received_ms": [now] * n,
                "kind": ["record"] * n,
                "topic": [topic] * n,
                "cursor": cursors,
                "seq": seqs,
                "ts": [TS0 + s * TS_STEP_MS for s in seqs],
                "tag": pa.nulls(n, pa.string()),
                "node": pa.nulls(n, pa.string()),
                "meta": pa.nulls(n, pa.string()),
                "data": data,
                "data_sha256": [hashlib.sha256(d.encode()).hexdigest() for d in data],
                "reason": pa.nulls(n, pa.string()),
                "gap_from": pa.nulls(n, pa.int64()),
                "gap_to": pa.nulls(n, pa.int64()),
                "head_seq": pa.nulls(n, pa.int64()),
            },
            schema=SCHEMA,
        )
        self.store.write_parquet(segment_name(first_frame, self.frame_no, self.folder), table)


def pipeline_run(spark, world: World, work: str, run_id: str) -> dict[str, float]:
    """One in-process pipeline run (the runner's steps on ``spark``); seconds per step, and
    ``cpu``: the CPU-seconds this process and the session's JVM spent on the run, the figure a
    busy machine disturbs least."""
    from spark_jobs import runner
    from watch_service.store import runs

    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    cpu0 = time.process_time() + cpu_s(jvm)

    layout = Layout(world.landing, work, run_id)
    with psycopg.connect(world.url, autocommit=True) as conn:
        runs.start_run(conn, run_id)
    seconds = {}
    checks = log = index = 0.0
    actions, commits = {}, {}
    for step in STEPS:
        executions, snapshots = last_execution(spark), table_snapshots(layout, world.url)
        t0 = time.monotonic()
        figures = runner.run_steps(spark, layout, world.url, steps=(step,))
        seconds[step] = time.monotonic() - t0
        actions[step] = last_execution(spark) - executions
        after = table_snapshots(layout, world.url)
        commits[step] = sum(n - snapshots.get(t, 0) for t, n in after.items())
        checks += figures.get(step, {}).get("rewind_checks", {}).get("seconds", 0.0)
        log += figures.get(step, {}).get("log_seconds", 0.0)
        index += (figures.get(step, {}).get("index") or {}).get("seconds", 0.0)
    seconds["total"] = sum(seconds.values())
    seconds["cpu"] = time.process_time() + cpu_s(jvm) - cpu0
    # Inside reconcile: the head cap, the phantom revisit, the rewind evidence, the digests.
    seconds["rewind_checks"] = checks
    seconds["log"] = log  # inside verify: the signed log's check, growth and signature
    # Inside verify: the search index checked against the source (``--index``).
    seconds["index_verify"] = index
    print(
        f"{run_id}: Spark SQL executions per step "
        + ", ".join(f"{k} {v}" for k, v in actions.items())
        + f" ({sum(actions.values())}); Iceberg commits per step "
        + ", ".join(f"{k} {v}" for k, v in commits.items())
        + f" ({sum(commits.values())})",
        flush=True,
    )
    return seconds


def last_execution(spark) -> int:
    """The id of the session's newest SQL execution (ids count up from 0; -1: none yet): the
    difference over a step is how many queries, actions and writes it ran."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    newest, it = -1, executions.iterator()
    while it.hasNext():
        newest = max(newest, int(it.next().executionId()))
    return newest


def table_snapshots(layout: Layout, url: str) -> dict[str, int]:
    """Per warehouse table, how many snapshots its metadata lists (pyiceberg: no Spark job)."""
    from pyiceberg.exceptions import NoSuchTableError

    from spark_jobs.warehouse.layout import TABLES
    from spark_jobs.warehouse.warehouse import Warehouse

    warehouse = Warehouse.open(layout, url)
    out = {}
    for name in TABLES:
        with contextlib.suppress(NoSuchTableError):
            out[name] = len(warehouse.metadata(name).snapshots)
    return out


def history_runs(
    root: str,
    url: str,
    sizes: list[int],
    new: int,
    storage: str,
    index: bool = False,
    warm: int = 0,
) -> dict[int, dict]:
    """The runs over growing history on one storage (``root``: a folder or an s3:// prefix).
    ``warm`` records are delivered and reconciled by an untimed run first, so the timed runs
    find a JVM that has run every step's Spark jobs once, whatever the code under test skips
    when nothing is new."""
    from spark_jobs.common.session import build_session

    world = World(url, f"{root}/landing", f"bench-{storage}", index)
    work = f"{root}/warehouse"
    print(f"== storage {storage}: {root}", flush=True)
    spark = build_session(
        "bench-pipeline",
        master="local[2]",
        conf={"spark.ui.enabled": "false", "spark.driver.memory": "2g"},
    )
    results: dict[int, dict] = {}
    try:
        if warm:
            world.add(warm)
            t0 = time.monotonic()
            pipeline_run(spark, world, work, f"{storage}-warm")
            print(
                f"warm-up: +{warm:,} reconciled in {time.monotonic() - t0:.1f} s ({load()})",
                flush=True,
            )
        for size in sorted(sizes):
            if size > world.total and index:  # verified history in bulk (``World.seed``)
                seeded = world.seed(
                    size - world.total, Layout("", work, "").catalog, f"{storage}-history-{size}"
                )
                print(
                    f"history {size:>9,}: seeded as verified in {seeded:.1f} s ({load()})",
                    flush=True,
                )
            if size > world.total:
                built = world.add(size - world.total)
                t0 = time.monotonic()
                pipeline_run(spark, world, work, f"{storage}-history-{size}")
                print(
                    f"history {size:>9,}: written in {built:.1f} s, reconciled in "
                    f"{time.monotonic() - t0:.1f} s ({load()})",
                    flush=True,
                )
            if size == min(sizes):
                empty = pipeline_run(spark, world, work, f"{storage}-empty-{size}")
                results[-1] = empty
                print(f"empty run over {size:,}: {fmt(empty)}", flush=True)
            world.add(new)
            results[size] = pipeline_run(spark, world, work, f"{storage}-plus{new}-{size}")
            print(f"+{new:,} over {size:>9,}: {fmt(results[size])} ({load()})", flush=True)
    finally:
        spark.stop()
    return results


def tlog_costs(base: Path, url: str, leaves: int, rows: int) -> dict[str, float]:
    """The signed audit log's own costs, without Spark: ``audit-log prove`` on a tree of
    ``leaves`` leaves (built with ``TopicLog.append``: tombstone leaves, so no audit-log rows
    are needed), and ``audit-log verify --from --to`` between runs ``rows / 10`` and ``rows /
    100`` leaves apart, on a pyiceberg audit log of ``rows`` rows in this PostgreSQL; and a
    run's own log work over the ``leaves``-leaf tree with ``NEW_ROWS`` new audit-log rows."""
    import dataclasses
    import json

    from spark_jobs import tlog_command, tlog_run, tlog_verify
    from spark_jobs.tlog_store import TopicLog
    from spark_jobs.warehouse import readers
    from watch_service import settings as settings_mod
    from watch_service.protocol.tlog import leaf, note
    from watch_service.storage import Storage

    out: dict[str, float] = {}
    signer = note.Signer.generate("bench.auditsync/tlog")
    warehouse = Storage.at(base / "tlog-bench")
    big = TopicLog.at(warehouse, "big", signer.verifier)
    t0 = time.monotonic()
    big.append(signer, (leaf.tombstone("big", s, "ttl") for s in range(1, leaves + 1)))
    out["build"] = time.monotonic() - t0
    proves = []
    for seq in (1, leaves // 2, leaves):  # each from a fresh log: no tile read is cached
        t0 = time.monotonic()
        tlog_command.prove(TopicLog.at(warehouse, "big", signer.verifier), seq).text()
        proves.append(time.monotonic() - t0)
    out["prove"] = max(proves)
    print(f"tlog: {leaves:,}-leaf tree built in {out['build']:.1f} s; prove "
          f"{', '.join(f'{p * 1000:.0f}' for p in proves)} ms ({load()})", flush=True)  # fmt: skip

    names = ("topic", "seq", "ts", "tag", "node", "meta", "data", "data_sha256", "origin")
    kinds = (pa.string(), pa.int64(), pa.int64(), *[pa.string()] * 6)
    schema = pa.schema([pa.field(n, k) for n, k in zip(names, kinds)])

    def audit_log(layout: Layout, topic: str):
        """An audit log in ``layout``'s warehouse, and a function adding rows of ``topic``."""
        catalog = readers.catalog(layout, url)
        catalog.create_namespace("audit")
        location = Storage(layout.warehouse).uri("audit/audit_log")
        table = catalog.create_table("audit.audit_log", schema=schema, location=location)
        with table.update_spec() as spec:
            spec.add_identity("topic")

        def add(first: int, last: int) -> None:
            data = [json.dumps({"n": s}) for s in range(first, last + 1)]
            table.append(pa.Table.from_pydict({
                "topic": [topic] * len(data), "seq": list(range(first, last + 1)),
                "ts": [TS0 + s for s in range(first, last + 1)], "tag": [None] * len(data),
                "node": [None] * len(data), "meta": [None] * len(data), "data": data,
                "data_sha256": [hashlib.sha256(d.encode()).hexdigest() for d in data],
                "origin": ["delivered"] * len(data)}, schema))  # fmt: skip

        return add

    # A run's own log work over that history (verify's ``log``: ``tlog_run.check_and_publish``,
    # its sweep of up to 8,192 signed seqs against the tiles, then the new leaves signed), with
    # ``NEW_ROWS`` audit-log rows after the tree's last leaf, as a run adding them leaves it.
    run_layout = Layout("", str(base / "tlog-bench"), "bench-run")
    audit_log(run_layout, "big")(leaves + 1, leaves + NEW_ROWS)
    keyed = dataclasses.replace(settings_mod.load(), log_signing_key=str(signer))
    t0 = time.monotonic()
    ran = tlog_run.check_and_publish(run_layout, url, keyed, {})
    out["run_log"] = time.monotonic() - t0
    assert ran.status == "signed", ran
    assert ran.checkpoints["big"]["size"] == leaves + NEW_ROWS, ran.checkpoints
    print(f"tlog: a run's log work over {leaves:,} leaves + {NEW_ROWS:,} new rows "
          f"{out['run_log']:.2f} s ({load()})", flush=True)  # fmt: skip

    layout = Layout("", str(base / "tlog-verify"), "")
    add = audit_log(layout, "t")

    marks = [rows - rows // 10, rows - rows // 100, rows]
    add(1, marks[0])
    for i, mark in enumerate(marks):
        if i:
            add(marks[i - 1] + 1, mark)
        tlog_command.publish(layout.work, url, signer, run_id=f"r{i}", topics=["t"], gaps={"t": []})
    log = TopicLog.at(Storage(layout.warehouse), "t", signer.verifier)
    table = readers.load(layout, url, "audit_log")
    snap = tlog_command.current_snapshot(table, None)
    for name, frm in (("verify_tenth", "r0"), ("verify_hundredth", "r1")):
        t0 = time.monotonic()
        tlog_verify.verify(log, table, snap, frm, "r2")
        out[name] = time.monotonic() - t0
    t0 = time.monotonic()
    tlog_verify.verify(log, table, snap)
    out["verify_all"] = time.monotonic() - t0
    print(f"tlog: verify over {rows:,} rows: --from/--to {rows // 10:,} leaves apart "
          f"{out['verify_tenth']:.2f} s, {rows // 100:,} apart {out['verify_hundredth']:.2f} s, "
          f"all {out['verify_all']:.2f} s ({load()})", flush=True)  # fmt: skip
    return out


def fmt(seconds: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:6.1f}" for k, v in seconds.items())


def dag_runs(
    base: Path, url: str, runs: int, modes: tuple[str, ...], baseline: Path | None = None
) -> dict[str, list[float]]:
    """Empty ``airflow dags test audit_sync`` runs, one of each of ``modes`` (``spark-connect``,
    ``spark-submit``, ``baseline``: another checkout's DAG and code, set up with its own venv,
    on the same Spark Connect server) in turn."""
    settings = Settings(local_dir=base / "dag", database_url=url)
    server = spark_connect.start(settings, port=free_port(), driver_memory="1g")
    env = airflow_env(
        settings,
        {
            "AUDITSYNC_SPARK_MASTER": "local[2]",
            "AUDITSYNC_WATCH_URL": "http://127.0.0.1:1",
            "AUDITSYNC_SPARK_CONNECT": server.url,
        },
    )
    full = {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"], env=full, check=True, capture_output=True
    )
    envs = dict.fromkeys(modes, full)
    if baseline is not None:
        envs[BASELINE] = other = baseline_env(full, base, baseline)
        Path(other["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [other["AUDITSYNC_AIRFLOW"], "db", "migrate"],
            env=other,
            check=True,
            capture_output=True,
        )
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    first = dt.datetime(2025, 6, 1, 12, 5, tzinfo=dt.UTC)
    try:
        for i in range(runs):
            for k, mode in enumerate(times):
                date = (first + dt.timedelta(minutes=15 * (len(modes) * i + k))).isoformat()
                times[mode].append(_dag_run(base, envs[mode], mode, date, i, server.pid))
    finally:
        spark_connect.stop(settings)
    return times


def baseline_env(env: dict, base: Path, checkout: Path) -> dict:
    """``env`` for ``checkout``'s Airflow: its DAG files, its venv (so its steps and plugin),
    an Airflow home of its own; the same databases, landing and Spark Connect server."""
    bin_dir = checkout / ".venv" / "bin"
    return {
        **env,
        "AIRFLOW_HOME": str(base / "dag-baseline-airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(checkout / "dags"),
        "AUDITSYNC_AIRFLOW": str(bin_dir / "airflow"),
        "AUDITSYNC_SPARK_SUBMIT": str(bin_dir / "spark-submit"),
        "PYSPARK_PYTHON": str(bin_dir / "python"),
        "PYSPARK_DRIVER_PYTHON": str(bin_dir / "python"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


class CpuSampler:
    """A process's CPU-seconds read every ``period`` seconds in a thread, so the CPU it spent
    between two wall-clock times (an Airflow task's start and end) can be read afterwards."""

    def __init__(self, pid: int, period: float = 0.1) -> None:
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, float]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> CpuSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()

    def _sample(self) -> None:
        while True:
            self.samples.append((time.time(), cpu_s(self.pid)))
            if self.stopped.wait(self.period):
                self.samples.append((time.time(), cpu_s(self.pid)))
                return

    def at(self, when: float) -> float:
        """The CPU-seconds of the last sample taken at or before ``when``."""
        i = bisect.bisect_right([t for t, _ in self.samples], when)
        return self.samples[max(0, i - 1)][1]

    def between(self, start: float, end: float) -> float:
        return self.at(end) - self.at(start)


def _dag_run(base: Path, env: dict, mode: str, date: str, i: int, server_pid: int) -> float:
    """One empty run; prints each task's seconds and the Spark Connect server's CPU-seconds
    while it ran, and the ``airflow dags test`` process's own CPU-seconds."""
    landing = base / "dag-landing"
    landing.mkdir(exist_ok=True)
    run_env = {
        **env,
        "AIRFLOW_VAR_AUDITSYNC_LANDING": str(landing),
        "AIRFLOW_VAR_AUDITSYNC_WAREHOUSE": str(base / f"dag-warehouse-{mode}"),
    }
    if mode == "spark-submit":
        run_env.pop("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", None)
    command = ["dags", "test", "audit_sync", date, "--mark-success-pattern", "wait_for_sinks"]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with CpuSampler(server_pid) as server:
        out = subprocess.run(
            [env.get("AUDITSYNC_AIRFLOW", str(BIN / "airflow")), *command],
            env=run_env,
            capture_output=True,
            text=True,
        )
    seconds = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = sum(getattr(after, f) - getattr(children, f) for f in ("ru_utime", "ru_stime"))
    (base / f"dag-{mode}-{i}.log").write_text(out.stdout + out.stderr)
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db") as db:
        tasks = db.execute(
            "SELECT task_id, state, duration, start_date, end_date FROM task_instance "
            "WHERE run_id = (SELECT run_id FROM dag_run WHERE dag_id = 'audit_sync' "
            "ORDER BY id DESC LIMIT 1) ORDER BY start_date"
        ).fetchall()
    shown = []
    for task, state, duration, started, ended in tasks:
        cpu = ""
        if started and ended and mode != "spark-submit":
            span = [dt.datetime.fromisoformat(x).replace(tzinfo=dt.UTC) for x in (started, ended)]
            cpu = f" (server {server.between(*(x.timestamp() for x in span)):.1f})"
        shown.append(f"{task} {state} {duration or 0:.1f}{cpu}")
    total = server.samples[-1][1] - server.samples[0][1]
    print(
        f"empty DAG run ({mode}): {seconds:.1f} s exit {out.returncode}; CPU: airflow process "
        f"{own:.1f} s, Spark Connect server {total:.1f} s ({load()})\n  " + "\n  ".join(shown),
        flush=True,
    )
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0,1000000,5000000")
    parser.add_argument("--new", type=int, default=2000)
    parser.add_argument(
        "--warm",
        type=int,
        default=2000,
        help="records an untimed first run delivers before the timed ones (0: none), so every "
        "timed run finds the JVM warmed by a run that had work",
    )
    parser.add_argument("--dag-runs", type=int, default=2)
    parser.add_argument("--skip-dag", action="store_true")
    parser.add_argument(
        "--dag-only", action="store_true", help="only the empty DAG runs (no tlog, no history)"
    )
    parser.add_argument(
        "--connect-only",
        action="store_true",
        help="the empty DAG runs on Spark Connect only, without the spark-submit ones",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (set up: its .venv) whose empty DAG runs interleave with this "
        "one's on the same Spark Connect server, printed as mode 'baseline'",
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--tlog-only",
        action="store_true",
        help="only the signed audit log's own costs: prove on --tlog-leaves, verify --from --to",
    )
    parser.add_argument("--tlog-leaves", type=int, default=5_000_000)
    parser.add_argument("--tlog-rows", type=int, default=200_000)
    parser.add_argument(
        "--storages",
        default="file,s3",
        help="where the landing zone and warehouse live: file (a local folder) and/or s3 "
        "(a real S3 server on loopback, S3Proxy)",
    )
    parser.add_argument(
        "--index",
        action="store_true",
        help="keep the search index too (a document per record, the consumer's mark), so "
        "verify checks it: its share of a run is printed",
    )
    args = parser.parse_args(argv)
    # SIGTERM (run_all's overrun backstop, or an operator's kill) unwinds through the finally
    # blocks, so the PostgreSQL, S3 and Spark this run started are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    storages = [x for x in args.storages.split(",") if x]
    sizes = [0, 100_000] if args.quick else [int(x) for x in args.sizes.split(",")]
    dag_n = 1 if args.quick else args.dag_runs
    base = Path(tempfile.mkdtemp(prefix="auditsync-bench-pipeline-"))
    base.chmod(0o755)  # the embedded server runs as the postgres user
    pg = EmbeddedPostgres(base / "pg", free_port())
    print(f"bench/pipeline.py: {load()}", flush=True)
    store = None
    by_storage: dict[str, dict[int, dict]] = {}
    try:
        pg.start()
        migrate(pg.url)
        tlog = None if args.dag_only else tlog_costs(base, pg.url, args.tlog_leaves, args.tlog_rows)
        if args.tlog_only:
            storages, args.skip_dag = [], True
        modes: tuple[str, ...] = ("spark-connect",)
        modes += () if args.connect_only else ("spark-submit",)
        modes += (BASELINE,) if args.baseline else ()
        dags = {} if args.skip_dag else dag_runs(base, pg.url, dag_n, modes, args.baseline)
        if not args.tlog_only:  # every run signs its audit log, as a run with a key does
            signer = Signer.generate("bench.auditsync/pipeline")
            os.environ["AUDITSYNC_LOG_SIGNING_KEY"] = str(signer)
        for storage in [] if args.dag_only else storages:
            root = str(base / "file")
            if storage == "s3":
                from watch_service.tools.objectstore import ObjectStore

                store = ObjectStore(base / "s3").start(buckets=("bench",))
                os.environ.update(store.config.environ())
                root = "s3://bench/pipeline"
            by_storage[storage] = history_runs(
                root, pg.url, sizes, args.new, storage, args.index, args.warm
            )
    finally:
        if store is not None:
            store.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
    if tlog is not None:
        print_tlog(args, tlog)
    if dags:
        print_dags(dags, dag_n)
    for storage, results in by_storage.items():
        print_history(args, sizes, storage, results)
    if len(by_storage) == 2:
        file_total, s3_total = (by_storage[k][max(sizes)]["total"] for k in ("file", "s3"))
        print(f"s3 / file over {max(sizes):,}: {s3_total / file_total:.2f}x")
    return 0


def print_tlog(args: argparse.Namespace, tlog: dict[str, float]) -> None:
    print(
        f"\ntlog: prove on {args.tlog_leaves:,} leaves {tlog['prove'] * 1000:.0f} ms "
        f"(target <= 200 ms); verify --from --to {tlog['verify_tenth']:.2f} s for "
        f"{args.tlog_rows // 10:,} leaves, {tlog['verify_hundredth']:.2f} s for "
        f"{args.tlog_rows // 100:,} (ratio {tlog['verify_tenth'] / tlog['verify_hundredth']:.1f}"
        f", leaves ratio 10); a run's log work over {args.tlog_leaves:,} leaves + "
        f"{NEW_ROWS:,} new {tlog['run_log']:.2f} s (target <= 5 % of the run)"
    )


def print_dags(dags: dict[str, list[float]], runs: int) -> None:
    medians = {mode: statistics.median(times) for mode, times in dags.items()}
    shown = ", ".join(f"{mode} {m:.1f} s" for mode, m in medians.items())
    ratio = (
        f", ratio {medians['spark-connect'] / medians['spark-submit']:.2f} (target <= 0.5)"
        if "spark-submit" in medians
        else ""
    )
    if BASELINE in medians:
        ratio += f", this / baseline {medians['spark-connect'] / medians[BASELINE]:.2f}"
    print(f"\nempty DAG run (median of {runs}): {shown}{ratio} (Spark Connect target <= 20 s)")


def print_history(
    args: argparse.Namespace, sizes: list[int], storage: str, results: dict[int, dict]
) -> None:
    first = results[min(sizes)]["total"]
    print(f"\n== {storage}: per-step seconds of a run adding {args.new:,} records")
    for size in sorted(sizes):
        r = results[size]
        print(
            f"history {size:>9,}: {fmt(r)}  ratio {r['total'] / first:.2f}x  "
            f"rewind checks {r.get('rewind_checks', 0) / r['total']:.1%} of the run "
            f"(target < 5 %), signed log {r.get('log', 0) / r['total']:.1%} (target <= 5 %)"
            + (
                f"  index verify {r['index_verify']:.2f} s, "
                f"{r['index_verify'] / r['total']:.1%} of the run (target <= 5 %)"
                if args.index
                else ""
            )
        )
    print(f"empty in-process run: {fmt(results[-1])}")
    biggest = results[max(sizes)]["total"] / first
    print(
        f"run over {max(sizes):,} / over {min(sizes):,}: {biggest:.2f}x (target <= 1.2); {load()}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
