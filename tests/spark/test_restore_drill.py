"""The restore drill, extended (issue 32): the source's whole database put back to a backup
under a running service and two running sinks, the pipeline's state in a database of its own.

Two databases on the session's cluster: the source (the service's, the search index's) and the
pipeline's. The service runs in-process on the source; two sinks, never restarted, land one
topic: ``c1`` keeps the search index, ``c2`` does not. On each storage (landing and warehouse
both local folders, or both S3 prefixes):

1. 200 records (content A) written and landed; the source's whole database backed up.
2. 100 more (A) written and landed; run ``r1``.
3. The backup put back (every table of the source's database): head 200. 150 records
   (content B) written as 201..350; both sinks land through 350 (whether the stream tells
   them of the rewind depends on whether the writers got there before they reconnected).
4. Run ``r2``.

Then every earlier run is listed with its verdicts, ``audit-log show --as-of r1`` answers as
it did before the restore, ``r2`` reports ``source_rewound`` for exactly 201..300, and the
search index and the audit log equal the source for every seq.
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
import psycopg
import pytest

from spark_jobs import runner, time_travel
from spark_jobs.common import statuses as st
from spark_jobs.warehouse.layout import Layout
from watch_service.storage import Storage
from watch_service.store import pipeline_state, runs
from watch_service.store.search_index import SearchIndex

from ..conftest import TEST_BUCKET
from ..restore import INDEX_TABLES, SOURCE_TABLES, RestorableDatabase
from ..sink import harness as lv
from ..support import InProcessService, unique, wait_for
from . import places

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(1200)]
WHOLE = (*SOURCE_TABLES, *INDEX_TABLES, *pipeline_state.TABLES)
SOURCE_HASHES = """SELECT seq, encode(sha256(convert_to(data::text, 'UTF8')), 'hex')
                     FROM records WHERE topic = %s"""
INDEX_DIFF = """SELECT coalesce(r.seq, d.seq) FROM
                  (SELECT seq, data::jsonb AS data FROM records WHERE topic = %(t)s) r
                  FULL JOIN (SELECT seq, data FROM search_documents WHERE topic = %(t)s) d
                  USING (seq)
                 WHERE r.data IS DISTINCT FROM d.data"""


async def append(http, url: str, topic: str, first: int, last: int, content: str) -> None:
    """Seqs ``first..last`` in batches of 50, each acknowledged with its exact seqs."""
    for start in range(first, last + 1, 50):
        end = min(last, start + 49)
        body = {"records": [{"data": {"n": n, "content": content}} for n in range(start, end + 1)]}
        async with http.post(f"{url}/v0/topics/{topic}/records", json=body) as r:
            assert r.status == 200, await r.text()
            ack = await r.json()
        assert (ack["first_seq"], ack["last_seq"]) == (start, end), ack


def landed(cfg, topic: str, seq: int, run: lv.Running | None = None):
    """The sink's landing holds ``seq`` durably; with ``run``, every landed frame indexed."""

    def check() -> bool:
        state = lv.state(cfg)
        if state.get("cursors") != {topic: seq}:
            return False
        return run is None or run.sink.spool.state.indexed_frame_no == state["frame_no"]

    return check


def pipeline_run(spark, landing: str, work: str, run_id: str, source: str, pipeline: str) -> int:
    args = argparse.Namespace(
        action="run", landing=landing, work=work, run_id=run_id, num_partitions=2, keep_runs=96
    )
    return runner.execute(spark, args, source, pipeline)


def as_of(work: str, topic: str, run_id: str, source: str, pipeline: str) -> time_travel.Page:
    """``auditsync audit-log show --as-of RUN_ID``'s page (1,000 rows)."""
    layout = Layout("", work, "")
    at = time_travel.AsOf(run_id=run_id)
    return time_travel.page(layout, pipeline, topic, at, 0, 1000, source_url=source)


@pytest.fixture(params=places.STORAGES)
def roots(request, tmp_path):
    """(landing, warehouse) locations, and the landing's Storage for the sinks."""
    if request.param == "s3":
        store = request.getfixturevalue("object_store")
        base = f"s3://{TEST_BUCKET}/{unique('drill')}"
        return f"{base}/landing", f"{base}/work", Storage.at(f"{base}/landing", store.config)
    return str(tmp_path / "landing"), str(tmp_path / "work"), Storage.at(tmp_path / "landing")


@pytest.fixture
def databases(pg_url, tmp_path):
    name = unique("drill").replace("-", "_")
    source = RestorableDatabase(pg_url, f"{name}_source", tmp_path).create()
    pipeline = RestorableDatabase(pg_url, f"{name}_pipeline", tmp_path).create()
    yield source, pipeline
    source.drop()
    pipeline.drop()


async def test_the_restore_drill_with_the_pipeline_apart(
    spark, databases, roots, base_settings, tmp_path
):
    source, pipeline = databases
    landing, work, landing_store = roots
    topic, r1, r2 = unique("drill"), unique("r1"), unique("r2")
    service = await InProcessService(base_settings, source.url).start()
    lock = None if landing_store.location.is_local else source.url
    c1 = lv.config(landing_store, service.url, lock, topics=(topic,), consumer="c1")
    c2 = lv.config(landing_store, service.url, lock, topics=(topic,), consumer="c2")
    try:
        async with aiohttp.ClientSession() as http:
            async with http.put(f"{service.url}/v0/topics/{topic}", json={}) as r:
                assert r.status == 201
            async with (
                lv.running(c1, SearchIndex(source.url)) as run1,
                lv.running(c2) as run2,
            ):
                await append(http, service.url, topic, 1, 200, "alpha")
                await wait_for(landed(c1, topic, 200, run1), 60, "c1 at 200, indexed")
                await wait_for(landed(c2, topic, 200), 60, "c2 at 200")
                backup = await source.dump(WHOLE)
                await append(http, service.url, topic, 201, 300, "alpha")
                await wait_for(landed(c1, topic, 300, run1), 60, "c1 at 300, indexed")
                await wait_for(landed(c2, topic, 300), 60, "c2 at 300")
                first = await asyncio.to_thread(
                    pipeline_run, spark, landing, work, r1, source.url, pipeline.url
                )
                with psycopg.connect(pipeline.url, autocommit=True) as conn:
                    r1_summary = runs.run_summary(conn, r1)
                before = as_of(work, topic, r1, source.url, pipeline.url)

                await source.restore(backup, WHOLE)
                await append(http, service.url, topic, 201, 350, "bravo")
                await wait_for(landed(c1, topic, 350, run1), 60, "c1 at 350, indexed")
                await wait_for(landed(c2, topic, 350), 60, "c2 at 350")
                assert not run1.task.done() and not run2.task.done()  # never restarted
        second = await asyncio.to_thread(
            pipeline_run, spark, landing, work, r2, source.url, pipeline.url
        )
    finally:
        await service.stop()

    assert (first, second) == (0, 0)
    with psycopg.connect(pipeline.url, autocommit=True) as conn:
        listed = {row["run_id"]: row["run_status"] for row in runs.recent_runs(conn, 10)}
        assert runs.run_summary(conn, r1) == r1_summary
        steps = runs.get_run(conn, r2)[3]
    assert listed == {r1: "passed", r2: "passed"}
    assert {(c, s): n for c, _, s, n, *_ in r1_summary} == {
        ("c1", st.DELIVERED): 300,
        ("c2", st.DELIVERED): 300,
    }
    assert steps["reconcile"]["rewound"] == {topic: [[201, 300]]}
    again = as_of(work, topic, r1, source.url, pipeline.url)
    assert (again.rows, again.snapshot_id) == (before.rows, before.snapshot_id)
    assert [row["seq"] for row in before.rows] == list(range(1, 301))

    with psycopg.connect(source.url, autocommit=True) as conn:
        hashes = dict(conn.execute(SOURCE_HASHES, (topic,)).fetchall())
        index_differs = conn.execute(INDEX_DIFF, {"t": topic}).fetchall()
        assert pipeline_state.held(conn) == pipeline_state.Held(0, 0)
    assert sorted(hashes) == list(range(1, 351))
    assert index_differs == []
    log = places.audit_rows(Layout("", work, ""), pipeline.url, ("seq", "data_sha256"))
    assert {int(seq): h for seq, h in log} == hashes
