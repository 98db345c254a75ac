"""verify's index check as the step calls it (``steps/verify/index_check.verify_index``), on
PostgreSQL and without Spark: the run's windows and compact figures as the run tables hold
them, a consumer's mark as its sink writes it."""

from __future__ import annotations

import psycopg
import pytest

from spark_jobs.steps.verify.index_check import render, verify_index
from watch_service.store import runs
from watch_service.store.search_index import upsert_documents_sync

from ..support import unique

pytestmark = [pytest.mark.pg]


def world(url: str, head: int, mark: int, compacted: int) -> tuple[str, str, str]:
    topic, consumer, run_id = unique("ixio"), unique("ixc"), unique("ixr")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO topics (name, head_seq) VALUES (%s, %s)", (topic, head))
        records = [(topic, s, 1_000 + s, None, f'{{"n":{s}}}') for s in range(1, head + 1)]
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO records (topic, seq, ts, tag, data) VALUES (%s, %s, %s, %s, %s)",
                records,
            )
        upsert_documents_sync(conn, records)
        conn.execute(
            "INSERT INTO search_index_marks (consumer, frame_no) VALUES (%s, %s)", (consumer, mark)
        )
        runs.start_run(conn, run_id, "wh-" + run_id)
        runs.record_step(conn, run_id, "compact", {"through": {consumer: [compacted, ""]}})
        conn.execute(
            runs.INSERT_RUN,
            {
                "run_id": run_id,
                "warehouse": "wh-" + run_id,
                "batch_from": 1,
                "batch_to": 1,
                "repairs_open": False,
            },
        )
        conn.execute(runs.INSERT_WINDOW, (run_id, consumer, topic, 0, 0, head, None))
    return topic, consumer, run_id


def test_the_check_finds_repairs_and_moves_its_slice(pg_url):
    topic, _, run_id = world(pg_url, 10, 2, 2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM search_documents WHERE doc_key = %s", (f"{topic}/4",))
    figures = verify_index(pg_url, pg_url, "wh-" + run_id, run_id, wait_s=0)
    assert figures.pop("seconds") >= 0
    assert figures == {
        "checked": 10,
        "missing": 1,
        "stale": 0,
        "extra": 0,
        "found": 1,
        "repaired": 1,
        "remaining": 0,
        "ranges": {topic: {"missing": [[4, 4]]}},
        "behind": {},
    }
    assert render(figures) == (
        "verify: search index: 1 documents wrong in 10 seqs checked "
        "(missing 1, stale 0, extra 0); 0 left after repair"
    )
    with psycopg.connect(pg_url) as conn:
        scrub = conn.execute(
            "SELECT scrubbed_through FROM index_scrubs WHERE warehouse = %s AND topic = %s",
            ("wh-" + run_id, topic),
        ).fetchone()
    assert scrub == (0,)  # a first window: nothing verified below it yet


def test_a_sink_whose_index_trails_the_run_is_left_out_and_named(pg_url):
    _, consumer, run_id = world(pg_url, 10, 3, 5)
    figures = verify_index(pg_url, pg_url, "wh-" + run_id, run_id, wait_s=0)
    assert (figures["checked"], figures["found"], figures["behind"]) == (0, 0, {consumer: [3, 5]})
    assert render(figures).splitlines()[1] == (
        f"verify: search index of {consumer} not checked: indexed through frame 3, compacted 5"
    )
