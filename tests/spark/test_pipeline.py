"""``auditsync pipeline run`` end to end as a command: a synthetic landing zone written with
pyarrow, a source in the test PostgreSQL, the four steps in one Spark session of their own,
exact summary counts, and a rerun of the same run id that changes nothing (the runner's
``execute`` in the layer's shared session: the command itself is proven by the first run).
The warehouse starts as one the full-rebuild pipeline (layout 1) left behind: it is migrated
once, with a message.

Source: topic A has seqs 1..10 (4 from node web-1, 3 tagged); topic B was capped at 5 after 8
appends, so 1..3 are a ``cap`` gap. Consumers:

- ``good`` subscribed A at 5 and B at 0: a from_seq_too_old tombstone for B 1..3, then all.
- ``bad`` filters web-1: A's 2 dropped (silent gap, repairable), 3 corrupted (mismatch,
  repairable), 6 twice, a phantom 11; B's 1..2 arrived before the trim, 3 never did
  (unverifiable: it filters a node).
- ``worse`` got B's 1..2 and 4..8: 3 is a silent gap whose source is gone (unrepairable).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs import runner, tlog_run
from spark_jobs.common import statuses as st
from spark_jobs.tlog_store import TopicLog
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import STEPS, Layout
from watch_service import settings
from watch_service.protocol.landing import COLUMNS
from watch_service.protocol.requests import NewRecord, TopicConfig
from watch_service.protocol.tlog import note
from watch_service.storage import Storage
from watch_service.store import tlog_runs
from watch_service.store import topics as store

from ..support import TEST_JVM_OPTIONS, unique
from .builders import Stream
from .tlog_checks import check_the_signed_log

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
# Tiny inputs: the test JVM options (C1-only JIT, serial GC) and no codegen/AQE halve a cold
# session's CPU.
SMALL_RUN = [
    x
    for kv in (
        f"spark.driver.extraJavaOptions={TEST_JVM_OPTIONS}",
        "spark.sql.shuffle.partitions=2",
        "spark.sql.adaptive.enabled=false",
        "spark.sql.codegen.wholeStage=false",
    )
    for x in ("--conf", kv)
]
_ARROW = {"string": pa.string(), "int64": pa.int64()}
SCHEMA = pa.schema([pa.field(n, _ARROW[k]) for n, k in COLUMNS])


async def _make_source(url: str, a: str, b: str) -> dict[tuple[str, int], str]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await store.put_topic(conn, a, TopicConfig(None, None))
        await store.put_topic(conn, b, TopicConfig(5, None))
        await store.append(
            conn,
            a,
            [
                NewRecord(
                    data=f'{{"i":{i},"s":"grüße"}}',
                    meta=None,
                    tag="k3" if i == 3 else None,
                    node="web-1" if i == 4 else None,
                )
                for i in range(1, 11)
            ],
        )
        await store.append(
            conn,
            b,
            [NewRecord(data=f'{{"b":{i}}}', meta=None, tag=None, node=None) for i in range(1, 9)],
        )
        cur = await conn.execute(
            "SELECT topic, seq, data::text FROM records WHERE topic IN (%s, %s)", (a, b)
        )
        return {(t, s): d for t, s, d in await cur.fetchall()}


def _write_landing(root: Path, stream: Stream, split: int) -> None:
    folder = root / stream.consumer
    folder.mkdir(parents=True)
    names = [c for c, _ in COLUMNS]
    frame_no = names.index("frame_no")
    early = [r for r in stream.rows if r[frame_no] <= split]
    for part in (early, stream.rows[len(early) :]):
        if part:
            first, last = part[0][frame_no], part[-1][frame_no]
            table = pa.Table.from_pylist([dict(zip(names, r)) for r in part], schema=SCHEMA)
            pq.write_table(table, folder / f"part-{first:012d}-{last:012d}.parquet")


def _landing(root: Path, a: str, b: str, data: dict) -> None:
    def text(topic, seqs):
        return {s: data[(topic, s)] for s in seqs if (topic, s) in data}

    good = (
        Stream("good", {a: 5, b: 0})
        .tombstone(b, 1, 3)
        .records(b, [4, 5, 6, 7, 8], data=text(b, range(4, 9)))
        .caught_up(b, 8)
        .records(a, [6, 7, 8, 9, 10], data=text(a, range(6, 11)))
        .caught_up(a, 10)
    )
    bad = (
        Stream("bad", {a: 0, b: 0}, filter_node="web-1")
        .records(a, [1], cursor=2, data=text(a, [1]))
        .records(a, [3], data={3: '{"i":3,"s":"grusse"}'})
        .records(a, [5, 6], data=text(a, [5, 6]))
        .records(a, [6], data=text(a, [6]))
        .records(b, [1, 2], data={1: '{"b":1}', 2: '{"b":2}'})
        .records(a, [7, 8, 9, 10, 11], data=text(a, range(7, 11)))
        .records(b, [4, 5, 6, 7, 8], data=text(b, range(4, 9)))
    )
    worse = (
        Stream("worse", {b: 0})
        .records(b, [1, 2], data={1: '{"b":1}', 2: '{"b":2}'})
        .records(b, [4, 5, 6, 7, 8], data=text(b, range(4, 9)))
    )
    for stream in (good, bad, worse):
        _write_landing(root, stream, split=3)


def _summary(url: str, run_id: str) -> dict:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT consumer, topic, status, count, remaining, example_seqs "
            "FROM reconcile_summary WHERE run_id = %s",
            (run_id,),
        ).fetchall()
        run = conn.execute(
            "SELECT status, defects_found, defects_remaining, steps ? 'verify' "
            "FROM pipeline_runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
    return {"rows": {(c, t, s): (n, r, ex) for c, t, s, n, r, ex in rows}, "run": run}


def _run_log(url: str, run_id: str) -> tuple | None:
    with psycopg.connect(url) as conn:
        return tlog_runs.run_log(conn, run_id)


def _edit_data_file(house: Layout, url: str, topic: str) -> None:
    """Seq 3's payload (and its hash, so the row is self-consistent) changed in place in the
    Iceberg data file that holds it: no commit, no new snapshot."""
    import hashlib

    table = readers.load(house, url, "audit_log")
    for path in table.inspect.files().column("file_path").to_pylist():
        local = path.removeprefix("file:")
        rows = pq.read_table(local)
        if not any(
            t == topic and q == 3
            for t, q in zip(rows["topic"].to_pylist(), rows["seq"].to_pylist())
        ):
            continue
        data = [
            '{"i":3,"s":"forged"}' if t == topic and q == 3 else d
            for t, q, d in zip(
                rows["topic"].to_pylist(), rows["seq"].to_pylist(), rows["data"].to_pylist()
            )
        ]
        sha = [
            hashlib.sha256(d.encode()).hexdigest() if t == topic and q == 3 else h
            for t, q, d, h in zip(
                rows["topic"].to_pylist(),
                rows["seq"].to_pylist(),
                data,
                rows["data_sha256"].to_pylist(),
            )
        ]
        rows = rows.set_column(
            rows.schema.get_field_index("data"),
            rows.schema.field("data"),
            pa.array(data, rows.schema.field("data").type),
        )
        rows = rows.set_column(
            rows.schema.get_field_index("data_sha256"),
            rows.schema.field("data_sha256"),
            pa.array(sha, rows.schema.field("data_sha256").type),
        )
        pq.write_table(rows, local)
        return
    raise AssertionError(f"no data file holds {topic} seq 3")


def _rewrite_with_seq_changed(house: Layout, url: str, topic: str) -> None:
    """The topic's rows rewritten through Iceberg (an overwrite commit), seq 1 now seq 4."""
    from pyiceberg.expressions import EqualTo

    table = readers.load(house, url, "audit_log")
    rows = table.scan(row_filter=EqualTo("topic", topic)).to_arrow()  # type: ignore[call-arg, arg-type]
    seqs = [4 if q == 1 else q for q in rows["seq"].to_pylist()]
    rows = rows.set_column(
        rows.schema.get_field_index("seq"), rows.schema.field("seq"), pa.array(seqs, pa.int64())
    )
    with pytest.warns(UserWarning, match="falling back to copy-on-write"):  # pyiceberg 0.12
        table.overwrite(rows, overwrite_filter=EqualTo("topic", topic))  # type: ignore[call-arg, arg-type]


def _search(url: str, a: str) -> list:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT doc_key, seq, data::text FROM search_documents "
            "WHERE topic = %s ORDER BY doc_key",
            (a,),
        ).fetchall()


def _pipeline(argv: list[str]) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.runner", *argv],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )


@pytest.mark.timeout(900)  # a cold Spark session; generous for a loaded 2-core machine
def test_pipeline_end_to_end_and_idempotent(spark, pg_url, tmp_path, monkeypatch, capsys):
    a, b = unique("pa"), unique("pb")
    data = asyncio.run(_make_source(pg_url, a, b))
    _landing(tmp_path / "landing", a, b, data)
    run_id = unique("run")
    argv = [
        "run",
        "--landing",
        str(tmp_path / "landing"),
        "--work",
        str(tmp_path / "work"),
        "--run-id",
        run_id,
        "--database-url",
        pg_url,
        "--driver-memory",
        "1g",
        "--num-partitions",
        "2",
        *SMALL_RUN,
    ]

    done = _pipeline(argv)
    assert done.returncode == runner.EXIT_FAILED_GATE, done.stderr[-3000:]
    out = done.stdout
    for step in STEPS:
        assert f"[pipeline] {step}" in out
    assert "FAILED quality gate" in out and "e.g. seq 11" in out

    first = _summary(pg_url, run_id)
    D, S, M, P = st.DELIVERED, st.SILENT_GAP, st.MISMATCH, st.PHANTOM
    assert first["rows"] == {
        ("good", a, D): (5, None, None),
        ("good", b, D): (5, None, None),
        ("good", b, st.TOMBSTONED): (3, None, None),
        ("bad", a, D): (7, None, None),
        ("bad", a, st.DUPLICATE): (1, None, None),
        ("bad", a, st.FILTERED): (1, None, None),
        ("bad", a, S): (1, 0, []),
        ("bad", a, M): (1, 0, []),
        ("bad", a, P): (1, 1, [11]),
        ("bad", b, D): (5, None, None),
        ("bad", b, st.TRIMMED_AFTER_DELIVERY): (2, None, None),
        ("bad", b, st.UNVERIFIABLE): (1, None, None),
        ("worse", b, D): (5, None, None),
        ("worse", b, st.TRIMMED_AFTER_DELIVERY): (2, None, None),
        ("worse", b, S): (1, 1, [3]),
    }
    assert first["run"] == ("failed", 4, 2, True)

    house = Layout("", str(tmp_path / "work"), "")
    audit = readers.audit_log(house, pg_url).to_pandas()
    by_key = {(str(r.topic), int(r.seq)): r for r in audit.itertuples()}
    assert sorted(by_key) == sorted(
        [(a, s) for s in (1, 2, 3, 5, 6, 7, 8, 9, 10)] + [(b, s) for s in (1, 2, 4, 5, 6, 7, 8)]
    )
    assert {s: by_key[(a, s)].origin for s in (1, 2, 3, 5)} == {
        1: st.ORIGIN_DELIVERED,
        2: st.ORIGIN_BACKFILL,
        3: st.ORIGIN_BACKFILL,
        5: st.ORIGIN_DELIVERED,
    }
    assert all(r.data == data[k] for k, r in by_key.items() if k in data)  # B 1..2: trimmed
    search = _search(pg_url, a)
    assert [(k, s) for k, s, _ in search] == [(f"{a}/2", 2), (f"{a}/k3", 3)]

    no_key = _run_log(pg_url, run_id)
    assert no_key == (tlog_run.NO_KEY, {})
    assert "verify: signed audit log unsigned: no signing key" in out

    # The same run id again, now with a signing key: same rows everywhere, no second migration,
    # and each topic's audit log signed by verify (A's 4 was owed to no consumer: an uncopied leaf).
    # The command's own path (arguments, session, exit status) is the first run's; this one is
    # the runner's `execute` of the same arguments in the layer's shared session, not a second
    # cold JVM.
    signer = note.Signer.generate("auditsync.test/pipeline")
    monkeypatch.setenv("AUDITSYNC_LOG_SIGNING_KEY", str(signer))
    again_args = runner.build_parser().parse_args(argv)
    assert runner.execute(spark, again_args, pg_url) == runner.EXIT_FAILED_GATE
    again_out = capsys.readouterr().out
    assert all(f"[pipeline] {step}" in again_out for step in STEPS)
    assert "FAILED quality gate" in again_out and "e.g. seq 11" in again_out
    assert _summary(pg_url, run_id) == first
    again = readers.audit_log(house, pg_url).to_pandas()
    cols = ["topic", "seq", "ts", "tag", "data", "data_sha256", "origin"]
    assert (
        again[cols].astype(str).sort_values(["topic", "seq"]).values.tolist()
        == audit[cols].astype(str).sort_values(["topic", "seq"]).values.tolist()
    )
    assert _search(pg_url, a) == search
    status, checkpoints = _run_log(pg_url, run_id)
    assert status == tlog_run.SIGNED
    assert {t: (c["old_size"], c["checked"], c["size"]) for t, c in checkpoints.items()} == {
        a: (0, [0, 0], 10),
        b: (0, [0, 0], 8),
    }
    log_b = TopicLog.at(Storage(house.warehouse), b, signer.verifier)
    assert log_b.open(checkpoints[b]["note"]).size == 8
    assert checkpoints[b]["note"] == log_b.signed(8) == log_b.signed()

    # The audit log that run left, signed, proved and verified (and then tampered with) by
    # hand, on a log of its own; then the pipeline's log is checked as the next run's verify
    # checks it: the row deleted (B's 5), then a tile overwritten, each named exactly.
    work = tmp_path / "work"
    (work / "tlog").rename(work / "tlog.pipeline")
    check_the_signed_log(monkeypatch, capsys, pg_url, work, a, b)
    (work / "tlog").rename(work / "tlog.cli")
    (work / "tlog.pipeline").rename(work / "tlog")
    monkeypatch.setenv("AUDITSYNC_LOG_SIGNING_KEY", str(signer))
    nxt = Layout("", str(work), unique("run"))
    found = tlog_run.check_and_publish(nxt, pg_url, settings.load(), checkpoints)
    assert (found.failure, found.checkpoints[a]["checked"]) == (
        f"{b}: seq 5 differs from the signed log: the audit log has no row of it; the signed "
        f"log holds a record",
        [0, 10],
    )
    for tamper, seq, why in (
        (_edit_data_file, 3, "the audit log's row is not the row that was signed"),
        (
            _rewrite_with_seq_changed,
            1,
            "the audit log has no row of it; the signed log holds a record",
        ),
    ):
        tamper(house, pg_url, a)
        found = tlog_run.check_and_publish(nxt, pg_url, settings.load(), checkpoints)
        assert found.failure == f"{a}: seq {seq} differs from the signed log: {why}"
    tile = work / "tlog" / a / "tile" / "0" / "000.p" / "10"
    tile.write_bytes(bytes(32) + tile.read_bytes()[32:])
    found = tlog_run.check_and_publish(nxt, pg_url, settings.load(), checkpoints)
    assert found.status == (
        f"failed: the tiles of {a}: the tiles of the right edge (tile/0/000.p/10) do not hash "
        f"to the root"
    )
