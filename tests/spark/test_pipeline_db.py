"""The pipeline's state in a database of its own (issue 32): the source's whole database put
back to a backup leaves every earlier run whole, and the rewind is found from the pipeline's
memory of the source.

Two databases on the session's cluster: the source (``DATABASE_URL``) and the pipeline's
(``AUDITSYNC_PIPELINE_DATABASE_URL``), file storage. Topic ``R``:

1. 200 records (content A), landed by ``c1`` and ``c2``; the source's whole database backed up.
2. 100 more (A), landed by both; run ``r1`` passes.
3. The backup is put back (every table of the source's database, its empty copies of the
   pipeline's tables too): head 200. 150 records (content B) are written as 201..350. ``c1``
   lands the stream's ``rewound`` frame for 201..300, then B for 201..350; ``c2``, whose
   session the restore took back to 200, gets B for 201..350 with no frame (late copies).
4. Run ``r2``.

Topic ``Q`` goes the same way with one consumer, ``cq``, that is told nothing: the seqs were
written again before it reconnected with its cursor at 300, so it lands B for 301..350 only.
No frame, no late copy: only the pipeline's memory of the top of what it verified of ``Q``
(its highest digest range, re-hashed every run) shows the rewind.

Without the pipeline's database apart, step 3 took ``r1`` away (``no pipeline run 'r1'``) and
with it the digests that show ``c2``'s copies were judged against other content.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json

import psycopg
import pytest

from spark_jobs import runner
from spark_jobs.common import statuses as st
from spark_jobs.warehouse.layout import Layout
from watch_service import cli
from watch_service.store import pipeline_state, runs

from ..restore import INDEX_TABLES, SOURCE_TABLES, RestorableDatabase
from ..support import unique
from . import places
from .builders import Stream, make_source, payload, sha, write_segment

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
# Everything the source's database holds, its (empty) copies of the pipeline's tables too.
WHOLE = (*SOURCE_TABLES, *INDEX_TABLES, *pipeline_state.TABLES)


def content_b(seq: int, topic: str) -> str:
    return json.dumps({"n": seq, "topic": topic, "written": "again"}, separators=(",", ":"))


def write(url: str, topic: str, seqs: range, data) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO records (topic, seq, ts, data) VALUES (%s, %s, %s, %s::json)",
                [(topic, s, 1_700_000_000_000 + s, data(s, topic)) for s in seqs],
            )
        conn.execute("UPDATE topics SET head_seq = %s WHERE name = %s", (seqs[-1], topic))


def databases(pg_url: str, tmp) -> tuple[RestorableDatabase, RestorableDatabase]:
    name = unique("pipedb").replace("-", "_")
    return (
        RestorableDatabase(pg_url, f"{name}_source", tmp).create(),
        RestorableDatabase(pg_url, f"{name}_pipeline", tmp).create(),
    )


def run(spark, landing: str, work: str, run_id: str, source: str, pipeline: str) -> int:
    """One ``auditsync pipeline run`` (start, the four steps, prune) in the test's session."""
    args = argparse.Namespace(
        action="run", landing=landing, work=work, run_id=run_id, num_partitions=2, keep_runs=96
    )
    return runner.execute(spark, args, source, pipeline)


def show(work: str, topic: str, as_of: str, source: str, pipeline: str) -> str:
    """``auditsync audit-log show --as-of … --json``: its output (exit 0, nothing on stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(
            [
                "audit-log",
                "show",
                "--topic",
                topic,
                "--work",
                work,
                "--as-of",
                as_of,
                "--limit",
                "1000",
                "--json",
                "--database-url",
                source,
                "--pipeline-database-url",
                pipeline,
            ]
        )
    assert (code, err.getvalue()) == (0, ""), err.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def world(spark, pg_url, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipedb")
    source, pipeline = databases(pg_url, tmp)
    r, q = unique("pr"), unique("pq")
    make_source(source.url, {r: {"seqs": list(range(1, 201))}, q: {"seqs": list(range(1, 201))}})
    root = places.root("file", tmp)
    landing, work = places.join(root, "landing"), places.join(root, "work")
    c1 = Stream("c1-" + r, {r: 0}).records(r, list(range(1, 201)))
    c2 = Stream("c2-" + r, {r: 0}).records(r, list(range(1, 201)))
    cq = Stream("cq-" + q, {q: 0}).records(q, list(range(1, 201)))
    backup = asyncio.run(source.dump(WHOLE))
    for topic, c in ((r, c1), (r, c2), (q, cq)):
        if c is not c2:
            write(source.url, topic, range(201, 301), payload)
        c.records(topic, list(range(201, 301)))
        write_segment(landing, c, 0, c.frame_no)
    r1, r2 = unique("r1"), unique("r2")
    first = run(spark, landing, work, r1, source.url, pipeline.url)
    with psycopg.connect(pipeline.url, autocommit=True) as conn:
        r1_summary = runs.run_summary(conn, r1)
    before = show(work, r, r1, source.url, pipeline.url)
    yield {
        "before": before,
        "r": r,
        "q": q,
        "source": source,
        "pipeline": pipeline,
        "work": work,
        "landing": landing,
        "runs": (r1, r2),
        "first": first,
        "r1_summary": r1_summary,
        "backup": backup,
        "streams": (c1, c2, cq),
        "spark": spark,
    }
    source.drop()
    pipeline.drop()


@pytest.fixture(scope="module")
def restored(world):
    """Steps 3 and 4, after the test below has read ``r1``'s audit log."""
    r, q, source, (c1, c2, cq) = world["r"], world["q"], world["source"], world["streams"]
    asyncio.run(source.restore(world["backup"], WHOLE))
    for topic in (r, q):
        write(source.url, topic, range(201, 351), content_b)
    b = {s: content_b(s, r) for s in range(201, 351)}
    ends = (c1.frame_no, c2.frame_no, cq.frame_no)
    c1.rewound(r, 201, 300, head=200).records(r, list(range(201, 351)), data=b)
    c2.records(r, list(range(201, 351)), data=b)
    cq.records(q, list(range(301, 351)), data={s: content_b(s, q) for s in range(301, 351)})
    for c, end in zip((c1, c2, cq), ends, strict=True):
        write_segment(world["landing"], c, end, c.frame_no)
    code = run(
        world["spark"],
        world["landing"],
        world["work"],
        world["runs"][1],
        source.url,
        world["pipeline"].url,
    )
    return {**world, "second": code}


def test_a_restored_source_leaves_the_pipelines_history_whole(world, restored):
    r, (r1, r2) = world["r"], world["runs"]
    source, pipeline = world["source"].url, world["pipeline"].url
    assert (world["first"], restored["second"]) == (0, 0)
    with psycopg.connect(pipeline, autocommit=True) as conn:
        listed = {row["run_id"]: row["run_status"] for row in runs.recent_runs(conn, 10)}
        assert runs.run_summary(conn, r1) == world["r1_summary"]
        second = runs.get_run(conn, r2)
    assert listed == {r1: "passed", r2: "passed"}
    q = world["q"]
    assert second[3]["reconcile"]["rewound"] == {r: [[201, 300]], q: [[201, 300]]}
    # c1's frame, and c2's late copies against r1's digests: both consumers' 100 rewound seqs
    summary = {(c, s): n for c, t, s, n, *_ in world["r1_summary"]}
    assert summary == {
        ("c1-" + r, st.DELIVERED): 300,
        ("c2-" + r, st.DELIVERED): 300,
        ("cq-" + q, st.DELIVERED): 300,
    }
    with psycopg.connect(pipeline, autocommit=True) as conn:
        net = runs.cumulative_summary(conn, Layout("", world["work"], "").catalog)
    for c in ("c1-" + r, "c2-" + r):
        assert net[(c, r, st.SOURCE_REWOUND)] == 100
        assert net[(c, r, st.DIVERGENT)] == 100
        assert net[(c, r, st.DELIVERED)] == 250  # 1..200 and 301..350: 201..300 revised
    # cq holds A for 201..300, judged again: a mismatch each, repaired by backfill
    assert {s: n for (c, t, s), n in net.items() if t == q} == {
        st.DELIVERED: 250,
        st.MISMATCH: 100,
        st.SOURCE_REWOUND: 100,
    }
    with psycopg.connect(source, autocommit=True) as conn:
        assert pipeline_state.held(conn) == pipeline_state.Held(0, 0)


def test_audit_log_show_as_of_an_earlier_run_answers_as_before(world, restored):
    """``--as-of r1`` reads what it read before the restore (A for 1..300); ``--as-of r2``
    the repaired log (B for 201..350)."""
    r, (r1, r2) = world["r"], world["runs"]
    urls = (world["source"].url, world["pipeline"].url)
    before = [json.loads(line) for line in world["before"].splitlines()]
    assert [(row["seq"], row["data_sha256"]) for row in before] == [
        (s, sha(payload(s, r))) for s in range(1, 301)
    ]
    assert show(world["work"], r, r1, *urls) == world["before"]
    for topic in (r, world["q"]):
        now = [json.loads(x) for x in show(world["work"], topic, r2, *urls).splitlines()]
        assert [(row["seq"], row["data_sha256"]) for row in now] == [
            (s, sha(payload(s, topic) if s <= 200 else content_b(s, topic))) for s in range(1, 351)
        ]
