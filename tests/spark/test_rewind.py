"""A source that goes back, and a head nobody may pass: two pipeline runs and a full audit
over one warehouse and one PostgreSQL, file storage (nothing here differs by storage).

Run 1, then the source changes in SQL as the events leave it, then run 2, then the audit:

- ``P`` (window cap): head 10; ``cp`` gets 1..10 and a phantom 17 (cursor 17). Then 11..20
  are written (17 with the phantom's content); ``cp`` gets 18 and 20 (the sink dropped 19).
- ``R`` (a restore, as the issue tells it): 200 records landed, the source copied, 100 more
  (content A) landed, run 1. The copy is put back (head 200), 150 records (content B) are
  written as 201..350; ``cr`` lands the stream's ``rewound`` frame for 201..300 and B for
  201..350. ``cr2`` landed 1..300 in run 1 and nothing since: it holds A for 201..300.
- ``Q`` (a restore nobody signalled): 30 records landed, run 1; back to head 20, B written as
  21..35; ``cq`` gets B for 21..35 from its restored session cursor 20 (late copies only).
- ``K`` (retention) 1..10 landed, then 1..5 trimmed; ``X`` 1..5 landed, then deleted.
- ``F`` (a failover that took the run tables with it, so no digest covers the lost seqs):
  head 5, ``cf`` lands 1..5, run 1. Then ``cf`` holds 6..10 but 8 (content A), lands the
  stream's ``rewound`` frame for 6..10, and B for the same seqs: the sink dropped 8 both times.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg
import pytest

from spark_jobs import findings, runner
from spark_jobs.common import jdbc
from spark_jobs.common import statuses as st
from spark_jobs.steps.reconcile import evidence, rewind, session_cursors
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service.store import runs, session_marks

from ..support import unique
from . import places
from .builders import Stream, make_source, payload, sha, write_segment

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "plugins") not in sys.path:  # as Airflow puts it
    sys.path.insert(0, str(ROOT / "plugins"))
BASE = "http://127.0.0.1:8080"


def content_b(seq: int, topic: str) -> str:
    return json.dumps({"n": seq, "topic": topic, "written": "again"}, separators=(",", ":"))


def restore(conn, topic: str, head: int, rewrite_to: int) -> None:
    """What a restore leaves (records above ``head`` gone, the head back), then the writers
    writing ``head + 1 .. rewrite_to`` again with content B."""
    conn.execute("DELETE FROM records WHERE topic = %s AND seq > %s", (topic, head))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO records (topic, seq, ts, data) VALUES (%s, %s, %s, %s::json)",
            [
                (topic, s, 1_700_000_000_000 + s, content_b(s, topic))
                for s in range(head + 1, rewrite_to + 1)
            ],
        )
    conn.execute("UPDATE topics SET head_seq = %s WHERE name = %s", (rewrite_to, topic))


def change_source(url: str, t: dict[str, str]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO records (topic, seq, ts, data) VALUES (%s, %s, %s, %s::json)",
                [(t["P"], s, 1_700_000_000_000 + s, payload(s, t["P"])) for s in range(11, 21)],
            )
        conn.execute("UPDATE topics SET head_seq = 20 WHERE name = %s", (t["P"],))
        restore(conn, t["R"], 200, 350)
        restore(conn, t["Q"], 20, 35)
        conn.execute("DELETE FROM records WHERE topic = %s AND seq <= 5", (t["K"],))
        conn.execute("INSERT INTO gaps VALUES (%s, 1, 5, 'cap')", (t["K"],))
        conn.execute("UPDATE topics SET earliest_seq = 6 WHERE name = %s", (t["K"],))
        conn.execute("DELETE FROM records WHERE topic = %s", (t["X"],))
        conn.execute("INSERT INTO gaps VALUES (%s, 1, 5, 'deleted')", (t["X"],))
        conn.execute("UPDATE topics SET deleted_at = now() WHERE name = %s", (t["X"],))
        restore(conn, t["F"], 5, 10)


def streams(t: dict[str, str]) -> list[tuple[Stream, list[int]]]:
    """Each stream with the last frame number landed by runs 1 and 2."""
    p, r, q = t["P"], t["R"], t["Q"]
    cp = Stream("cp-" + p, {p: 0}).records(p, list(range(1, 11)))
    cp.records(p, [17], cursor=17)  # 1-2 | 3
    cp.records(p, [18, 20], cursor=20)
    cr = Stream("cr-" + r, {r: 0}).records(r, list(range(1, 201))).records(r, list(range(201, 301)))
    cr.rewound(r, 201, 300, head=200)  # 1-2 | 3-4
    cr.records(r, list(range(201, 351)), data={s: content_b(s, r) for s in range(201, 351)})
    cr2 = Stream("cr2-" + r, {r: 0}).records(r, list(range(1, 301)))  # 1 | nothing
    cq = Stream("cq-" + q, {q: 0}).records(q, list(range(1, 31)))  # 1 | 2
    cq.records(q, list(range(21, 36)), cursor=35, data={s: content_b(s, q) for s in range(21, 36)})
    ck = Stream("ck-" + t["K"], {t["K"]: 0}).records(t["K"], list(range(1, 11)))
    cx = Stream("cx-" + t["X"], {t["X"]: 0}).records(t["X"], list(range(1, 6)))
    f, held = t["F"], [6, 7, 9, 10]
    cf = Stream("cf-" + f, {f: 0}).records(f, list(range(1, 6)))  # 1 | 2-4
    cf.records(f, held, cursor=10).rewound(f, 6, 10, head=5)
    cf.records(f, held, cursor=10, data={s: content_b(s, f) for s in held})
    return [
        (cp, [2, 3]),
        (cr, [2, 4]),
        (cr2, [1, 1]),
        (cq, [1, 2]),
        (ck, [1, 1]),
        (cx, [1, 1]),
        (cf, [1, 4]),
    ]


@pytest.fixture(scope="module")
def world(spark, pg_url, tmp_path_factory):
    t = {k: unique("rw" + k.lower()) for k in ("P", "R", "Q", "K", "X", "F")}
    make_source(
        pg_url,
        {
            t["P"]: {"seqs": list(range(1, 11))},
            t["R"]: {"seqs": list(range(1, 301))},
            t["Q"]: {"seqs": list(range(1, 31))},
            t["K"]: {"seqs": list(range(1, 11))},
            t["X"]: {"seqs": list(range(1, 6))},
            t["F"]: {"seqs": list(range(1, 6))},
        },
    )
    root = places.root("file", tmp_path_factory.mktemp("rewind"))
    landing, work = places.join(root, "landing"), places.join(root, "work")
    plan = streams(t)
    figures, run_ids = [], [unique("rw"), unique("rw")]
    for run in (0, 1):
        if run == 1:
            change_source(pg_url, t)
        for stream, ends in plan:
            write_segment(landing, stream, ends[run - 1] if run else 0, ends[run])
        figures.append(
            runner.run_steps(spark, Layout(landing, work, run_ids[run]), pg_url, partitions=2)
        )
    audit = runner.audit(spark, Layout(landing, work, unique("rwaudit")), pg_url, 2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        net = runs.cumulative_summary(conn, Layout("", work, "").catalog)
    return {
        "t": t,
        "figures": figures,
        "audit": audit,
        "net": net,
        "work": work,
        "url": pg_url,
        "run_ids": run_ids,
    }


def test_the_window_stops_at_the_head(world):
    """A phantom above the head does not move the window past it; the seqs written later are
    judged: the phantom's matching copy is delivered (its verdict revised), the seqs the
    cursor jumped and the one the sink dropped are silent gaps."""
    p, net = world["t"]["P"], world["net"]
    first, second = (f["reconcile"] for f in world["figures"])
    mine = {k[2]: n for k, n in net.items() if k[1] == p}
    assert mine == {st.DELIVERED: 13, st.SILENT_GAP: 7}
    with psycopg.connect(world["url"]) as conn:
        progress = {r["topic"]: r["reconciled_through"] for r in runs.consumer_progress(conn)}
    assert progress[p] == 20
    assert first[st.PHANTOM] == 1
    assert second[st.SILENT_GAP] == 7 + 1  # 11..16 and 19 of P, 8 of F


def test_a_restore_is_reported_and_repaired(world):
    t, net = world["t"], world["net"]
    second = world["figures"][1]
    r, q = t["R"], t["Q"]
    rec = second["reconcile"]
    assert rec["rewound"] == {r: [[201, 300]], q: [[21, 30]], t["F"]: [[6, 10]]}
    assert net[("cr-" + r, r, st.SOURCE_REWOUND)] == 100
    assert net[("cr-" + r, r, st.DIVERGENT)] == 100
    assert net[("cr-" + r, r, st.DELIVERED)] == 250
    assert ("cr-" + r, r, st.DUPLICATE) not in net
    assert net[("cq-" + q, q, st.SOURCE_REWOUND)] == 10
    assert net[("cq-" + q, q, st.DIVERGENT)] == 10
    assert net[("cq-" + q, q, st.DELIVERED)] == 25
    # cr2 got nothing new: its delivered copies of 201..300 are content A, a mismatch now
    assert net[("cr2-" + r, r, st.MISMATCH)] == 100
    assert net[("cr2-" + r, r, st.DELIVERED)] == 200
    assert second["verify"]["found"] == 100 + 100 + 10 + 7 + 5 and second["verify"]["passed"]
    layout = Layout("", world["work"], "")
    log = {
        (topic, int(seq)): data_sha
        for topic, seq, data_sha in places.audit_rows(
            layout, world["url"], ("topic", "seq", "data_sha256")
        )
    }
    assert all(log[(r, s)] == sha(content_b(s, r)) for s in range(201, 351))
    assert all(log[(r, s)] == sha(payload(s, r)) for s in range(1, 201))
    assert all(log[(q, s)] == sha(content_b(s, q)) for s in range(21, 36))


def test_the_page_and_the_alert_show_the_rewound_ranges(world):
    """The restore run's own rows, as the Reconciliation page and the defects alert read them:
    the rewound ranges in the rewound colour, one alert line per topic with its reason, and
    each defect line's exact ranges as the findings view reads them."""
    from auditsync_plugin.notifications import alerts, alerts_render
    from auditsync_plugin.ui.page import render_page
    from auditsync_plugin.ui.runs import pivot

    r, q, p, f = (world["t"][k] for k in "RQPF")
    second = world["run_ids"][1]
    with psycopg.connect(world["url"]) as conn:
        rows = [x for x in runs.recent_runs(conn, 500) if x["run_id"] == second]
        row = runs.get_run(conn, second)
        summary = runs.run_summary(conn, second)
    lines = {(x.consumer, x.topic): x for x in pivot(rows, st.REPAIRABLE, st.DEFECTS)}
    assert (lines[("cr-" + r, r)].rewound, lines[("cr-" + r, r)].rewound_ranges) == (
        100,
        [(201, 300)],
    )
    assert (lines[("cq-" + q, q)].rewound, lines[("cq-" + q, q)].rewound_ranges) == (
        10,
        [(21, 30)],
    )
    page = render_page(list(lines.values()), False)
    assert page.count('<div class="rewound">source rewound: 201–300</div>') == 2
    assert page.count('<div class="rewound">source rewound: 21–30</div>') == 2
    assert page.count('<div class="rewound">source rewound: 6–10</div>') == 2
    assert page.count('<li class="card v-rewound" data-verdict="rewound">') == 3
    ranges = findings.read(world["url"], second)
    found = alerts.findings(summary, [], st.DEFECTS, BASE, second, ranges)
    alert = alerts.run_alert(alerts.DEFECTS_FOUND, "audit_sync", "a1", second, row, found, BASE)
    assert alert is not None
    topics = ", ".join(sorted((r, q, f)))
    assert alert.title == (
        f"audit_sync: run {second} found 222 defects (all repaired); source rewound on {topics}"
    )
    said = alerts_render.text(alert).splitlines()
    for topic, seqs in ((r, "201–300"), (q, "21–30"), (f, "6–10")):
        assert f"- {topic} source_rewound: seqs {seqs}: {alerts_render.REWOUND_REASON}" in said
        assert f'<td>{topic}</td><td class="rewound">{seqs}</td>' in alerts_render.html(alert)
    assert [x for x in said if x.startswith("- c")] == [
        f"- cf-{f}/{f} divergent: found 4, left 0, seqs 6–7, 9–10",
        f"- cf-{f}/{f} silent_gap: found 1, left 0, seqs 8",
        f"- cp-{p}/{p} silent_gap: found 7, left 0, seqs 11–16, 19",
        f"- cq-{q}/{q} divergent: found 10, left 0, seqs 21–30",
        f"- cr-{r}/{r} divergent: found 100, left 0, seqs 201–300",
        f"- cr2-{r}/{r} mismatch: found 100, left 0, seqs 201–300",
    ]


def test_a_rewind_only_the_stream_said_is_reported_and_its_missing_seq_is_silent(world):
    """No digest covers ``F``'s lost seqs (as after a failover of the PostgreSQL that held the
    run tables): the landed ``rewound`` frame alone reports them. The frame is no signalled
    loss: the seq the sink dropped, which the source holds again, is a ``silent_gap``."""
    f, net = world["t"]["F"], world["net"]
    assert {k[2]: n for k, n in net.items() if k[:2] == ("cf-" + f, f)} == {
        st.DELIVERED: 5,
        st.DIVERGENT: 4,
        st.SILENT_GAP: 1,
        st.SOURCE_REWOUND: 5,
    }


def test_the_full_audit_agrees_after_retention_and_deletion(world):
    audit = world["audit"]
    assert audit["agree"], audit["differences"]
    k, x = world["t"]["K"], world["t"]["X"]
    assert world["net"][("ck-" + k, k, st.DELIVERED)] == 10
    assert world["net"][("cx-" + x, x, st.DELIVERED)] == 5


def test_runs_the_database_forgot_are_noticed(world, spark):
    """The warehouse keeps both runs' verdicts; a PostgreSQL that went back to before run 2
    committed would not know it (here: the committed set without it)."""
    assert world["figures"][1]["reconcile"]["runs_unknown_to_postgres"] == []
    layout = Layout("", world["work"], unique("rwlater"))
    first, second = world["run_ids"]
    warehouse = Warehouse.attach(spark, layout, world["url"])
    assert evidence.unknown_runs(warehouse, {first}) == [second]


def test_a_restore_with_the_sessions_is_found_by_their_cursors(world, spark):
    """A source restored together with its watch sessions, above all the pipeline verified
    (seqs 1..10 of ``S``; its head, 25, is back above that and the digest still matches): the
    session's cursor, back from 30 to 20 under the same stream, names the lost seqs 21..30.
    (The restore itself at PostgreSQL level: ``tests/store/test_session_marks``.)"""
    s, wid, url = unique("rws"), unique("w"), world["url"]
    layout = Layout("", world["work"], unique("rwcursor"))
    house = layout.catalog
    make_source(url, {s: {"seqs": list(range(1, 31))}})
    with psycopg.connect(url, autocommit=True) as conn:
        [(digest, _)] = runs.ranges_now(conn, [(s, 1, 10)])
        runs.store_digests(conn, house, "rw-verified", [(s, 1, 10, digest)])
        conn.execute(
            "INSERT INTO watch_sessions (wid, definition, cursors, stream_gen) "
            "VALUES (%s, '{}', %s::jsonb, 1)",
            (wid, json.dumps({s: 30})),
        )
        seen = session_marks.sessions_now(conn, [s], [])
        session_marks.replace(conn, house, "rw-marked", seen)
        restore(conn, s, 20, 25)  # the records, and the sessions with them:
        conn.execute(
            "UPDATE watch_sessions SET cursors = %s::jsonb WHERE wid = %s",
            (
                json.dumps({s: 20}),
                wid,
            ),
        )
        warehouse = Warehouse.attach(spark, layout, url)
        found = evidence.find(
            spark,
            conn,
            conn,
            warehouse,
            jdbc.jdbc_target(url),
            {s: 25},
            [],
            [],
            runs.run_order(conn, house),
            [],
            {s},
        )
    assert found.went_back == [session_cursors.WentBack(wid, s, 20, 30, session_cursors.GENERATION)]
    assert (found.ranges, found.reported, found.checked) == ({}, {s: [(21, 30)]}, 1)
    assert [(x.wid, x.cursor, x.stream_gen) for x in found.sessions] == [(wid, 20, 1)]


def test_the_pure_rules_of_a_rewind():
    """The cap, the spans a run re-checks, the merge of ranges, and the held seqs."""
    row = dict.fromkeys(("scope_id", "start_seq", "filter_node"))
    rows = [
        {**row, "consumer": "c", "topic": "a", "lo": 5, "watermark": 17},
        {**row, "consumer": "c", "topic": "b", "lo": 30, "watermark": 35},  # head went back
        {**row, "consumer": "c", "topic": "z", "lo": 0, "watermark": 3},  # no such topic
    ]
    capped = [(r[2], r[4], r[5]) for r in rewind.cap_scope(rows, {"a": 10, "b": 20})]
    assert capped == [("a", 5, 10), ("b", 30, 30), ("z", 0, 0)]
    assert rewind.suspect_spans({"a": 10}, [("a", 2, 4)], {"a": [(7, 8)]}) == [
        ("a", 3, 4),
        ("a", 7, 8),
        ("a", 11, rewind.TOP),
    ]
    assert rewind.merge([("a", 5, 6), ("a", 1, 4), ("a", 9, 9), ("b", 1, 1)]) == {
        "a": [(1, 6), (9, 9)],
        "b": [(1, 1)],
    }
    progress = [("c", "a", 0, 250, None), ("d", "a", 220, 400, None), ("e", "b", 0, 9, None)]
    assert rewind.held(progress, {"a": [(201, 300)]}) == [
        ("c", "a", 201, 250),
        ("d", "a", 221, 300),
    ]
