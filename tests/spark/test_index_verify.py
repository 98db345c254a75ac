"""The search index verified, not trusted (issue 32): a gap the pipeline did not cause, inside
a window an earlier run already verified, is found by the next run, repaired and alerted.

One topic, one consumer ``ci`` whose sink keeps the index (it holds a mark in
``search_index_marks``; here the test indexes what the consumer received with the sink's own
statement and moves the mark as the sink does). Run 1 verifies 1..300 and finds the index
right. Then one document is deleted and another changed by hand, both in 1..300, and 301..320
are written, landed and indexed. Run 2 judges only 301..320, yet its index check covers the
verified history too: it finds both documents, repairs them, and its alert says so."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

from spark_jobs import runner
from spark_jobs.warehouse.layout import Layout
from watch_service.store import runs
from watch_service.store.search_index import upsert_documents_sync

from ..support import unique
from . import places
from .builders import Stream, make_source, payload, write_segment

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "plugins") not in sys.path:  # as Airflow puts it
    sys.path.insert(0, str(ROOT / "plugins"))
BASE = "http://127.0.0.1:8080"


def index(conn, consumer: str, topic: str, seqs: range, frame_no: int) -> None:
    """What the consumer's sink does with a segment: upsert its records, then move its mark."""
    upsert_documents_sync(
        conn, [(topic, s, 1_700_000_000_000 + s, None, payload(s, topic)) for s in seqs]
    )
    conn.execute(
        "INSERT INTO search_index_marks (consumer, frame_no) VALUES (%s, %s) "
        "ON CONFLICT (consumer) DO UPDATE SET frame_no = excluded.frame_no",
        (consumer, frame_no),
    )


def documents(conn, topic: str) -> dict[int, str]:
    cur = conn.execute("SELECT seq, data::text FROM search_documents WHERE topic = %s", (topic,))
    return dict(cur.fetchall())


def test_a_gap_in_a_verified_window_is_found_repaired_and_alerted(spark, pg_url, tmp_path):
    from auditsync_plugin.notifications import alerts, alerts_render

    topic = unique("ix")
    consumer = "ci-" + topic
    make_source(pg_url, {topic: {"seqs": list(range(1, 301))}})
    root = places.root("file", tmp_path)
    landing, work = places.join(root, "landing"), places.join(root, "work")
    stream = Stream(consumer, {topic: 0}).records(topic, list(range(1, 301)))
    write_segment(landing, stream, 0, 1)
    run_ids = [unique("ix"), unique("ix")]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        index(conn, consumer, topic, range(1, 301), 1)
        first = runner.run_steps(spark, Layout(landing, work, run_ids[0]), pg_url, partitions=2)
        assert first["verify"]["index"].pop("seconds") >= 0
        assert first["verify"]["index"] == {
            "checked": 300,
            "missing": 0,
            "stale": 0,
            "extra": 0,
            "found": 0,
            "repaired": 0,
            "remaining": 0,
            "ranges": {},
            "behind": {},
        }
        before = documents(conn, topic)

        conn.execute("DELETE FROM search_documents WHERE doc_key = %s", (f"{topic}/50",))
        conn.execute(
            'UPDATE search_documents SET data = \'{"by":"hand"}\' WHERE doc_key = %s',
            (f"{topic}/120",),
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO records (topic, seq, ts, data) VALUES (%s, %s, %s, %s::json)",
                [(topic, s, 1_700_000_000_000 + s, payload(s, topic)) for s in range(301, 321)],
            )
        conn.execute("UPDATE topics SET head_seq = 320 WHERE name = %s", (topic,))
        stream.records(topic, list(range(301, 321)))
        write_segment(landing, stream, 1, 2)
        index(conn, consumer, topic, range(301, 321), 2)

        second = runner.run_steps(spark, Layout(landing, work, run_ids[1]), pg_url, partitions=2)
        assert second["verify"]["passed"]
        assert second["verify"]["index"].pop("seconds") >= 0
        assert second["verify"]["index"] == {
            "checked": 320,
            "missing": 1,
            "stale": 1,
            "extra": 0,
            "found": 2,
            "repaired": 2,
            "remaining": 0,
            "ranges": {topic: {"missing": [[50, 50]], "stale": [[120, 120]]}},
            "behind": {},
        }
        after = documents(conn, topic)
        assert {s: after[s] for s in before} == before
        assert len(after) == 320
        row = runs.get_run(conn, run_ids[1])

    alert = alerts.run_alert(alerts.DEFECTS_FOUND, "audit_sync", "a2", run_ids[1], row, [], BASE)
    assert alert is not None
    assert alert.title == (
        f"audit_sync: run {run_ids[1]} found 0 defects (all repaired); "
        "search index: 2 documents wrong (all repaired)"
    )
    said = alerts_render.text(alert).splitlines()
    assert f"- {topic} search index missing: seqs 50" in said
    assert f"- {topic} search index stale: seqs 120" in said
    assert f"<td>{topic}</td><td>stale</td><td>120</td>" in alerts_render.html(alert)
