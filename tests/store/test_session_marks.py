"""A source restored together with its watch sessions, found through the sessions' cursors
(issue 32) where its heads and digests alone show nothing: the pipeline verified seqs 1..100
only, the lost seqs are 201..300, and the head is back above 100 by the time it looks.

The source is a database of its own, restored from a ``pg_dump`` of its log and sessions
tables (``tests/restore``); the pipeline's marks and digests are in another. The sessions are
written through the service's own store functions (``store/sessions``), as its streams write
them: a stream opens with the next generation, saves its cursors, and a client may move them
back when it opens one.
"""

from __future__ import annotations

import psycopg
import pytest

from spark_jobs.steps.reconcile import session_cursors as sc
from watch_service.store import runs, session_marks, sessions

from ..restore import RestorableDatabase
from ..support import unique

pytestmark = [pytest.mark.pg]

HOUSE = "wh"
LEASE_S = 30.0


def write(conn, topic: str, seqs: range, content: str) -> None:
    """Records ``seqs`` of ``topic`` with ``content``, and the head at the last."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO records (topic, seq, ts, data) VALUES (%s, %s, %s, %s::json)",
            [(topic, s, 1_000 + s, f'{{"n":{s},"w":"{content}"}}') for s in seqs],
        )
    conn.execute("UPDATE topics SET head_seq = %s WHERE name = %s", (seqs[-1], topic))


async def stream(db, wid: str, cursors: dict[str, int]) -> int:
    """A stream opens on ``wid`` from ``cursors`` (the client's, where lower); its generation."""
    gen = await sessions.open_stream(db, wid, cursors, LEASE_S)
    assert gen is not None
    return gen


def look(pipeline: str, source: str, topics: list[str]) -> tuple[list, list]:
    """What a run reads: the marks, and the sessions now."""
    with (
        psycopg.connect(pipeline, autocommit=True) as conn,
        psycopg.connect(source, autocommit=True) as src,
    ):
        marks = session_marks.marks(conn, HOUSE)
        return marks, session_marks.sessions_now(src, topics, marks)


def commit(pipeline: str, run_id: str, seen: list) -> None:
    with psycopg.connect(pipeline) as conn, conn.transaction():
        session_marks.replace(conn, HOUSE, run_id, seen)


@pytest.fixture
async def pair(pg_url, tmp_path):
    name = unique("marks").replace("-", "_")
    source = RestorableDatabase(pg_url, f"{name}_source", tmp_path).create()
    pipeline = RestorableDatabase(pg_url, f"{name}_pipeline", tmp_path).create()
    yield source, pipeline.url
    source.drop()
    pipeline.drop()


async def test_a_restore_with_the_sessions_is_found_by_the_cursors(pair):
    source, pipeline = pair
    t, u = unique("mt"), unique("mu")
    w1, w2, w3 = (unique("w") for _ in range(3))
    async with await psycopg.AsyncConnection.connect(source.url, autocommit=True) as db:
        with psycopg.connect(source.url, autocommit=True) as conn:
            conn.execute("INSERT INTO topics (name) VALUES (%s), (%s)", (t, u))
            write(conn, t, range(1, 201), "alpha")
            write(conn, u, range(1, 51), "alpha")
        for wid, topic in ((w1, t), (w2, t), (w3, u)):
            await sessions.create(db, wid, {"topics": {topic: {}}}, {topic: 0}, None, None)
        gens = {w: await stream(db, w, c) for w, c in ((w1, {t: 200}), (w2, {t: 200}))}
        gens[w3] = await stream(db, w3, {u: 50})
        backup = await source.dump()  # the sinks caught up at 200: the copy a backup keeps

        with psycopg.connect(source.url, autocommit=True) as conn:
            write(conn, t, range(201, 301), "alpha")
        saved = [(w1, gens[w1], {t: 250}), (w2, gens[w2], {t: 300})]
        assert await sessions.save_cursors(db, saved, LEASE_S) == {(w1, 1), (w2, 1)}
        # Run r1 verified 1..100 of t (its digest) and marked the sessions.
        with psycopg.connect(source.url, autocommit=True) as src:
            [(digest, n)] = runs.ranges_now(src, [(t, 1, 100)])
        with psycopg.connect(pipeline) as conn, conn.transaction():
            runs.store_digests(conn, HOUSE, "r1", [(t, 1, 100, digest)])
        marks, seen = look(pipeline, source.url, [t, u])
        assert marks == [] and n == 100
        commit(pipeline, "r1", seen)

        await source.restore(backup)
        with psycopg.connect(source.url, autocommit=True) as conn:
            write(conn, t, range(201, 261), "bravo")
        assert await stream(db, w2, {t: 200}) == 2  # w2's sink reconnects after the restore
        assert await stream(db, w3, {u: 20}) == 2  # w3's client moves its own cursor back

    marks, seen = look(pipeline, source.url, [t, u])
    assert sorted((m.wid, m.topic, m.cursor, m.stream_gen) for m in marks) == sorted(
        [(w1, t, 250, 1), (w2, t, 300, 1), (w3, u, 50, 1)]
    )
    with (
        psycopg.connect(pipeline, autocommit=True) as conn,
        psycopg.connect(source.url, autocommit=True) as src,
    ):
        # Heads and digests alone: the head (260) is above all the pipeline verified (100),
        # and the one stored range hashes as judged.
        assert runs.source_heads(src, [t]) == {t: 260}
        assert runs.top_ranges(conn, HOUSE, [t]) == [(t, 1, 100)]
        assert runs.digests_meeting(conn, HOUSE, [(t, 1, 2**62)], src) == [
            (t, 1, 100, digest, digest)
        ]
    back = sc.went_back(marks, seen)
    assert back == sorted(
        [
            sc.WentBack(w1, t, 200, 250, sc.GENERATION),  # restored with its stream's generation
            sc.WentBack(w2, t, 200, 300, sc.CONTENT),  # a new stream; seq 300 is bravo's now
        ]
    )
    assert sorted(sc.ranges(back, {t: 100})) == [(t, 201, 250), (t, 201, 300)]

    # The run's commit makes what it saw the marks: the rewind is reported once.
    commit(pipeline, "r2", seen)
    marks, seen = look(pipeline, source.url, [t, u])
    assert sc.went_back(marks, seen) == []
    assert sorted((m.wid, m.cursor, m.stream_gen, m.payload_hash is None) for m in marks) == (
        sorted([(w1, 200, 1, False), (w2, 200, 2, False), (w3, 20, 2, False)])
    )
