"""A warehouse in the hand-written layout 2 is converted into the Iceberg tables once, by
``auditsync pipeline convert`` (a run meets it with one line naming that command): every
committed batch, verdict and audit-log row kept exactly, the incremental progress carried
over (the run judges only the new segments), one message, the old folders aside; a
conversion killed midway finishes exactly; nothing happens the second time.

The old warehouse is written file by file with pyarrow, as layout 2 laid it out (``B``'s name
has a ``:``, escaped in its folder names as Spark wrote them). Source: ``A`` seqs 1..9, ``B``
1..6. ``c1`` got A 1..3 (batch 1), 4..6 (batch 2) and lands 7..9 now; ``c2`` got B 1..3 and
4..6. Runs ``r1`` (batch 1) and ``r2`` (batch 2) are committed in PostgreSQL under the old id;
``crashed`` left a detail and a ledger but never committed; batch 3 was being moved in when a
compact crashed (a pending list, no record). The audit log: A and B on one day (last
rewritten by ``r2`` and ``r1``), B's 4..6 on the next (no manifest names it; a backfill
crashed swapping it in, so its journal must be rolled forward).
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import ArrayType, DateType, LongType, StringType, StructType

from spark_jobs import legacy, runner, time_travel
from spark_jobs.common import errors
from spark_jobs.common import statuses as st
from spark_jobs.steps.verify.transforms import LEFT
from spark_jobs.warehouse import readers, tables
from spark_jobs.warehouse.layout import TABLES, Layout
from spark_jobs.warehouse.schemas import AUDIT_LOG, DELIVERIES, DETAIL, LEDGER, SUMMARY
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.protocol.landing import COLUMN_NAMES
from watch_service.store import runs

from ..support import unique
from .builders import Stream, make_source, payload, sha, write_segment

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

_ARROW = {StringType(): pa.string(), LongType(): pa.int64(), DateType(): pa.date32()}


def _arrow(schema: StructType, drop: tuple[str, ...] = ()) -> pa.Schema:
    def kind(t):
        return pa.list_(pa.int64()) if isinstance(t, ArrayType) else _ARROW[t]

    return pa.schema([(f.name, kind(f.dataType)) for f in schema.fields if f.name not in drop])


def _put(path: Path, rows: list[dict], schema: StructType, drop: tuple[str, ...] = ()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=_arrow(schema, drop)), path)


def _esc(topic: str) -> str:
    """A topic as Spark named its partition folder (``:`` is one of the escaped characters)."""
    return topic.replace(":", "%3A")


def _json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def _deliveries(stream: Stream, frame: int) -> list[dict]:
    """A frame's landing rows with ``cursor_before`` (one topic per stream)."""
    rows = [dict(zip(COLUMN_NAMES, r)) for r in stream.rows]
    before = {r["frame_no"] + 1: r["cursor"] for r in rows}
    return [{**r, "cursor_before": before.get(frame)} for r in rows if r["frame_no"] == frame]


def _verdict(consumer: str, topic: str, seq: int, status: str = st.DELIVERED) -> dict:
    return {
        "consumer": consumer,
        "topic": topic,
        "seq": seq,
        "seq_to": seq,
        "status": status,
        "source_hash": sha(payload(seq, topic)),
        "delivered_hash": None,
        "copies": 1,
    }


def _audit(topic: str, seq: int, ts: int) -> dict:
    text = payload(seq, topic)
    return {
        "seq": seq,
        "ts": ts,
        "tag": f"k{seq}" if seq == 2 else None,
        "node": "web-1" if seq == 3 else None,
        "meta": '{"m":1}' if seq == 4 else None,
        "data": text,
        "data_sha256": sha(text),
        "origin": st.ORIGIN_BACKFILL if seq == 5 else st.ORIGIN_DELIVERED,
    }


def build_layout2(work: Path, url: str, old: str, c1: Stream, c2: Stream, a: str, b: str):
    """The old warehouse at ``work`` and its runs in PostgreSQL."""
    _json(work / "_layout.json", {"version": 2, "id": old})
    ta, tb = f"topic={_esc(a)}", f"topic={_esc(b)}"
    d, consumers, files = work / "deliveries", {}, []
    for batch in (1, 2, 3):
        for stream, topic in ((c1, a), (c2, b)):
            rel = f"consumer={stream.consumer}/topic={_esc(topic)}/b{batch:08d}-part-00000.parquet"
            rows = _deliveries(stream, batch)
            _put(d / rel, rows, DELIVERIES, ("consumer", "topic"))
            if batch == 3:
                _json(d / "_batches/b00000003.pending.json", {"files": [rel]})
                continue
            files.append(rel)
            consumers[stream.consumer] = {
                "segment_through": batch,
                "frame_no": batch,
                "frame_id": rows[-1]["frame_id"],
            }
        if batch < 3:
            record = {"batch": batch, "run_id": f"c{batch}", "files": files, "segments": {}}
            _json(d / f"_batches/b{batch:08d}.json", {**record, "consumers": consumers})
    ledger = {"seq": 5, "seq_to": 5, "status": st.SILENT_GAP, "copies": 0, "judged_batch": 2}
    for run in ("r2", "crashed"):
        folder = work / f"ledger/run={run}/consumer={c2.consumer}/{tb}"
        _put(folder / "part-00000.parquet", [ledger], LEDGER, ("consumer", "topic"))
    for run, batch, seqs, parts in (
        ("r1", 1, range(1, 4), [f"{ta}/date=2023-11-14", f"{tb}/date=2023-11-14"]),
        ("r2", 2, range(4, 7), [f"{ta}/date=2023-11-14"]),
    ):
        detail = [_verdict(c, t, s) for c, t in ((c1.consumer, a), (c2.consumer, b)) for s in seqs]
        _put(work / f"runs/{run}/detail/part-00000.parquet", detail, DETAIL)
        summary = [
            {"run_id": run, "consumer": c, "topic": t, "status": st.DELIVERED, "count": 3}
            | {"revised": 0}
            for c, t in ((c1.consumer, a), (c2.consumer, b))
        ]
        _put(work / f"runs/{run}/summary/part-00000.parquet", summary, SUMMARY)
        left = {"run_id": "r1", **_verdict(c2.consumer, b, 2, st.SILENT_GAP), "left": 1}
        _put(work / f"runs/{run}/remaining/part-00000.parquet", [left], LEFT)
        manifest = {"run_id": run, "batches": [batch, batch], "audit_partitions": parts}
        _json(work / f"runs/{run}/manifest.json", {**manifest, "deliveries": [], "late": False})
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            windows = [(c, t, 0, 3 * batch - 3, 3 * batch, None) for c, t in ((c1.consumer, a),)]
            windows.append((c2.consumer, b, 0, 3 * batch - 3, 3 * batch, None))
            rows = [(r["consumer"], r["topic"], r["status"], 3, 0) for r in summary]
            runs.commit_reconcile(conn, old, run, (batch, batch), False, windows, rows)
            runs.start_run(conn, run)
            runs.finish_run(conn, run, True, 0, 0)
    _put(work / "runs/crashed/detail/part-00000.parquet", [_verdict("x", a, 1)], DETAIL)
    _put(work / "audits/full1/detail/part-00000.parquet", [_verdict(c1.consumer, a, 1)], DETAIL)
    whole = {"run_id": "full1", "consumer": c1.consumer, "topic": a, "status": st.DELIVERED}
    _put(work / "audits/full1/summary/p.parquet", [whole | {"count": 6, "revised": 0}], SUMMARY)
    day = 1_700_000_000_000  # 2023-11-14
    for folder, topic, seqs, ts in (
        (f"{ta}/date=2023-11-14", a, range(1, 7), day),
        (f"{tb}/date=2023-11-14", b, range(1, 4), day),
        # A backfill crashed swapping in B's 15th: 4..6 staged, 4..5 retired, a journal.
        (f"_staging/r3/{tb}/date=2023-11-15", b, range(4, 7), day + 86_400_000),
        (f"{tb}/.retired-date=2023-11-15", b, range(4, 6), day + 86_400_000),
    ):
        rows = [_audit(topic, s, ts + s) for s in seqs]
        _put(work / "audit_log" / folder / "part-00000.parquet", rows, AUDIT_LOG, ("topic", "date"))
    _json(work / "audit_log/_swaps/r3.json", {"folders": [f"{tb}/date=2023-11-15"]})


def old_rows(folder: Path) -> list[dict]:
    """pyarrow's read of an old table: each file's rows plus its path's partition values."""
    out = []
    for path in sorted(folder.rglob("*.parquet")):
        rel = path.relative_to(folder)
        if any(p.startswith(("_", ".")) for p in rel.parts):
            continue
        values = {
            k: urllib.parse.unquote(v)
            for k, v in (p.split("=", 1) for p in rel.parts[:-1] if "=" in p)
        }
        out += [{**row, **values, "_file": str(rel)} for row in pq.read_table(path).to_pylist()]
    return out


def canon(rows: list[dict], schema: StructType, *extra: str) -> list[tuple]:
    """Rows as sorted tuples of text over the schema's columns and ``extra``."""
    names = [f.name for f in schema.fields] + list(extra)
    return sorted(tuple(str(r.get(n)) for n in names) for r in rows)


def table_rows(layout: Layout, url: str, name: str) -> list[dict]:
    return readers.scan(readers.load(layout, url, name)).to_pylist()


class Crash(Exception):
    pass


def crash_at(point: str):
    def hook(at: str) -> None:
        if at == point:
            raise Crash(at)

    return hook


def test_layout2_warehouse_converted_once_exactly(spark, pg_url, tmp_path, capsys):
    a, b, old = unique("la"), unique("lb") + ":x", unique("old")  # b's folders: lb-…%3Ax
    make_source(pg_url, {a: {"seqs": list(range(1, 10))}, b: {"seqs": list(range(1, 7))}})
    c1 = Stream(unique("c1"), {a: 0}).records(a, [1, 2, 3]).records(a, [4, 5, 6])
    c1.records(a, [7, 8, 9])
    c2 = Stream(unique("c2"), {b: 0}).records(b, [1, 2, 3]).records(b, [4, 5, 6])
    c2.records(b, [7])  # batch 3 of the crashed compact, never committed
    landing, work = tmp_path / "landing", tmp_path / "work"
    for n in (1, 2, 3):
        write_segment(landing, c1, n - 1, n)
    for n in (1, 2):
        write_segment(landing, c2, n - 1, n)
    build_layout2(work, pg_url, old, c1, c2, a, b)
    layout = Layout(str(landing), str(work), unique("new"))

    # Killed after two tables, then after the first folder moved aside: nothing printed yet.
    tables.create(spark, layout, pg_url)
    for point in ("legacy.ledger", "legacy.moving"):
        with pytest.raises(Crash):
            legacy.convert(spark, layout, pg_url, crash_at(point))
    assert capsys.readouterr().err == ""
    # A run refuses the old layout with one line naming the command; the command converts.
    with pytest.raises(errors.WarehouseError) as refused:
        runner.run_steps(spark, layout, pg_url, partitions=2)
    assert str(refused.value) == (
        f"{layout.work} is a layout-2 warehouse (hand-written Parquet): convert it once with "
        f"`auditsync pipeline convert --work {layout.work}`, then run again"
    )
    assert runner.convert(spark, layout, pg_url) == 0
    figures = runner.run_steps(spark, layout, pg_url, partitions=2)
    err = capsys.readouterr().err
    assert err.count("[pipeline]") == 1 and err.count("layout-2 warehouse") == 1, err
    aside = work / "legacy-layout2"
    assert f"The old files are in {aside.as_uri()}" in err and "delete them" in err
    assert f"2 reconcile run(s) of warehouse {old} are now keyed {layout.catalog}" in err
    assert (
        "(rows: deliveries 12, ledger 1, detail 12, summary 4, remaining 2, audit_detail 1, "
        "audit_summary 1, audit_log 12). Delivery batches 1..2 are kept" in err
    )

    # The run judged only the new segment: batch 3, A 7..9.
    assert {k: figures["compact"][k] for k in ("batch", "segments", "rows")} == {
        "batch": 3,
        "segments": 1,
        "rows": 3,
    }
    assert figures["reconcile"]["batches"] == [3, 3] and figures["reconcile"]["seqs"] == 3
    assert figures["verify"]["passed"]
    with psycopg.connect(pg_url) as conn:
        keyed = conn.execute(
            "SELECT warehouse, array_agg(run_id ORDER BY run_id) FROM reconcile_runs "
            "WHERE warehouse IN (%s, %s) GROUP BY 1",
            (old, layout.catalog),
        ).fetchall()
    assert keyed == [(layout.catalog, sorted(["r1", "r2", layout.run_id]))]

    # Everything old is where it was, moved aside whole; every committed row is in its table.
    assert sorted(p.name for p in work.iterdir()) == ["audit", "legacy-layout2"]
    assert sorted(p.name for p in aside.iterdir()) == [
        "_layout.json",
        "audit_log",
        "audits",
        "deliveries",
        "ledger",
        "runs",
    ]
    assert not (aside / "audit_log/_swaps/r3.json").exists()
    got = {name: table_rows(layout, pg_url, name) for name in TABLES}
    committed = [
        r | {"batch": int(r["_file"].rsplit("/", 1)[1][1:9])}
        for r in old_rows(aside / "deliveries")
    ]
    committed = [r for r in committed if r["batch"] <= 2]  # not the crashed compact's batch 3
    assert len(committed) == 12
    converted = [r for r in got["deliveries"] if r["batch"] <= 2]
    assert canon(converted, DELIVERIES, "batch") == canon(committed, DELIVERIES, "batch")
    # Batch 3 continues from the converted state: its first frame's cursor_before is 6.
    fresh = [(r["seq"], r["cursor_before"]) for r in got["deliveries"] if r["batch"] == 3]
    assert sorted(fresh) == [(7, 6), (8, 6), (9, 6)]
    ledger = [r | {"run_id": r["run"]} for r in old_rows(aside / "ledger") if r["run"] == "r2"]
    assert canon(got["ledger"], LEDGER, "run_id") == canon(ledger, LEDGER, "run_id")
    for name, schema, column, top in (
        ("detail", DETAIL, "run_id", "runs"),
        ("remaining", LEFT, "verify_run", "runs"),
        ("audit_detail", DETAIL, "run_id", "audits"),
    ):
        want = [
            r | {column: owner}
            for owner in (["r1", "r2"] if top == "runs" else ["full1"])
            for r in old_rows(aside / top / owner / name.removeprefix("audit_"))
        ]
        mine = [r for r in got[name] if r[column] != layout.run_id]
        assert canon(mine, schema, column) == canon(want, schema, column), name
    for name, top in (("summary", "runs"), ("audit_summary", "audits")):
        want = [r for r in old_rows(aside / top) if "/summary/" in "/" + r["_file"]]
        want = [r for r in want if not r["_file"].startswith("crashed")]
        mine = [r for r in got[name] if r["run_id"] != layout.run_id]
        assert canon(mine, SUMMARY) == canon(want, SUMMARY), name
    writer = {(a, "2023-11-14"): "r2", (b, "2023-11-14"): "r1", (b, "2023-11-15"): "legacy"}
    audit_old = [
        r | {"run_id": writer[(r["topic"], r["date"])]} for r in old_rows(aside / "audit_log")
    ]
    assert len(audit_old) == 12
    audit_new = [r for r in got["audit_log"] if r["run_id"] != layout.run_id]
    assert canon(audit_new, AUDIT_LOG, "run_id") == canon(audit_old, AUDIT_LOG, "run_id")
    assert sorted(r["seq"] for r in got["audit_log"] if r["run_id"] == layout.run_id) == [7, 8, 9]

    # "As run r2 left it" predates the history: refused, not an empty audit log.
    with psycopg.connect(pg_url) as conn:
        target = time_travel.resolve(conn, layout, time_travel.AsOf(run_id="r2"))
    table = readers.load(layout, pg_url, "audit_log")
    with pytest.raises(time_travel.TimeTravelError, match="before the warehouse was converted"):
        time_travel.snapshot_of(table, target, "the audit log as run r2 left it")

    # A second time: no message, no commit anywhere.
    wh = Warehouse.open(layout, pg_url, spark=spark)
    before = wh.snapshots(TABLES)
    assert legacy.convert(spark, layout, pg_url) is None
    assert capsys.readouterr().err == ""
    assert wh.snapshots(TABLES) == before


def test_layout1_warehouse_keeps_its_audit_log_and_recompacts(spark, pg_url, tmp_path, capsys):
    """The full-rebuild layout: deliveries by consumer only, no marker, no run state."""
    work = tmp_path / "work1"
    row = _deliveries(Stream("c", {"t": 0}).records("t", [1]), 1)[0]
    _put(work / "deliveries/consumer=c/part-00000.parquet", [row], DELIVERIES, ("consumer",))
    _put(work / "runs/r0/detail/part-00000.parquet", [_verdict("c", "t", 1)], DETAIL)
    rows = [_audit("t", s, 1_700_000_000_000 + s) for s in (1, 2, 3)]
    _put(work / "audit_log/topic=t/date=2023-11-14/p.parquet", rows, AUDIT_LOG, ("topic", "date"))
    layout = Layout("", str(work), unique("l1"))
    runner.convert(spark, layout, pg_url)
    err = capsys.readouterr().err
    assert err.count("[pipeline]") == 1 and "was a layout-1 warehouse" in err, err
    assert "(rows: audit_log 3)" in err and "compacted afresh" in err
    assert sorted(p.name for p in work.iterdir()) == ["audit", "legacy-layout1"]
    aside = work / "legacy-layout1"
    assert sorted(p.name for p in aside.iterdir()) == ["audit_log", "deliveries", "runs"]
    want = [r | {"run_id": "legacy"} for r in old_rows(aside / "audit_log")]
    got = table_rows(layout, pg_url, "audit_log")
    assert len(got) == 3
    assert canon(got, AUDIT_LOG, "run_id") == canon(want, AUDIT_LOG, "run_id")
    assert table_rows(layout, pg_url, "deliveries") == []
    assert Warehouse.open(layout, pg_url).compact_state() == {"batch": 0, "consumers": {}}
    assert legacy.convert(spark, layout, pg_url) is None
    assert capsys.readouterr().err == ""
