"""The pipeline's run tables (migrations 003, 006, 021): ``pipeline_runs``,
``reconcile_summary``, the incremental state ``reconcile_runs`` / ``reconcile_windows`` and the
per-range source digests ``reconcile_digests``. All their SQL lives here, with the reads of
the source reconcile makes outside Spark (the topics' heads at judgement time, the digests of
seq ranges now).

The run tables live in the pipeline's database, which may be apart from the source's
(``store/pipeline_state``): no statement here joins the two. A function that reads both takes
the source's connection as ``source``.

Every function takes a synchronous DB-API connection (psycopg 3, or psycopg2 as Airflow's
``PostgresHook.get_conn()`` gives) and never commits: the caller owns the transaction (open the
connection with ``autocommit=True`` for one-statement calls; ``commit_reconcile`` and
``record_verify`` must run inside one transaction so their rows appear together). Writes are
idempotent upserts keyed by run_id, so a step re-run under the same run_id replaces its rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from watch_service.protocol import hashes

START_RUN = """
INSERT INTO pipeline_runs (run_id, warehouse) VALUES (%(run_id)s, %(warehouse)s)
ON CONFLICT (run_id) DO UPDATE
   SET status = 'running', started_at = now(), updated_at = now(), finished_at = NULL,
       steps = '{}'::jsonb, defects_found = NULL, defects_remaining = NULL,
       failed_step = NULL, failure_reason = NULL,
       warehouse = coalesce(excluded.warehouse, pipeline_runs.warehouse)
"""
# A step failed for good: the run ends failed, naming the step and why; the defect figures a
# failed gate recorded stay.
FAIL_RUN = """
INSERT INTO pipeline_runs (run_id, warehouse, status, finished_at, failed_step, failure_reason)
VALUES (%(run_id)s, %(warehouse)s, 'failed', now(), %(step)s, %(reason)s)
ON CONFLICT (run_id) DO UPDATE
   SET status = 'failed', finished_at = now(), updated_at = now(),
       failed_step = excluded.failed_step, failure_reason = excluded.failure_reason,
       warehouse = coalesce(excluded.warehouse, pipeline_runs.warehouse)
"""
RECORD_STEP = """
INSERT INTO pipeline_runs (run_id, steps) VALUES (%(run_id)s, %(step)s::jsonb)
ON CONFLICT (run_id) DO UPDATE
   SET steps = pipeline_runs.steps || excluded.steps, updated_at = now()
"""
RECORD_SNAPSHOTS = """
INSERT INTO pipeline_runs (run_id, warehouse, snapshots)
VALUES (%(run_id)s, %(warehouse)s, %(snapshots)s::jsonb)
ON CONFLICT (run_id) DO UPDATE
   SET snapshots = pipeline_runs.snapshots || excluded.snapshots,
       warehouse = excluded.warehouse, updated_at = now()
"""
RUN_SNAPSHOTS = """SELECT warehouse, snapshots, finished_at FROM pipeline_runs
                    WHERE run_id = %(run_id)s"""
REFERENCED_SNAPSHOTS = """SELECT snapshots FROM pipeline_runs
                           WHERE warehouse = %(warehouse)s AND started_at >= %(since)s"""
RUN_BATCHES = """SELECT batch_from, batch_to FROM reconcile_runs WHERE run_id = %(run_id)s"""
FINISH_RUN = """
UPDATE pipeline_runs
   SET status = %(status)s, defects_found = %(found)s, defects_remaining = %(remaining)s,
       finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s
"""
# What the findings view needs of a run: its warehouse, whether verify ran, whether a
# verify since saw its repairable defects repaired (repairs_open false; NULL: no reconcile).
RUN_FINDINGS = """SELECT p.warehouse, p.steps ? 'verify', r.repairs_open
                     FROM pipeline_runs p LEFT JOIN reconcile_runs r USING (run_id)
                    WHERE p.run_id = %(run_id)s"""
GET_RUN = """SELECT status, defects_found, defects_remaining, steps
               FROM pipeline_runs WHERE run_id = %(run_id)s"""
GET_FAILURE = """SELECT failed_step, failure_reason FROM pipeline_runs
                   WHERE run_id = %(run_id)s"""
RECENT_RUNS = """
WITH recent AS (
    SELECT run_id, status AS run_status, started_at, finished_at,
           (snapshots ->> 'audit_log')::bigint AS audit_snapshot,
           steps -> 'reconcile' -> 'rewound' AS rewound, failed_step, failure_reason,
           log_status, checkpoints, steps -> 'compact' -> 'redelivered' AS redelivered
    FROM pipeline_runs ORDER BY started_at DESC LIMIT %(limit)s
)
SELECT r.run_id, r.run_status, r.started_at, r.finished_at, r.audit_snapshot,
       s.consumer, s.topic, s.status, s.count - s.revised AS count, s.remaining,
       r.rewound -> s.topic AS rewound, r.failed_step, r.failure_reason, r.log_status,
       r.checkpoints -> s.topic AS checkpoint, r.redelivered
FROM recent r LEFT JOIN reconcile_summary s ON s.run_id = r.run_id
ORDER BY r.started_at DESC, s.consumer, s.topic, s.status
"""
# Per consumer and topic: how far the pipeline has reconciled (over every warehouse) and the
# topic's head now; the Reconciliation page's lag table.
CONSUMER_PROGRESS = """
SELECT DISTINCT ON (w.consumer, w.topic) w.consumer, w.topic, w.seq_to AS reconciled_through,
       r.recorded_at
  FROM reconcile_windows w JOIN reconcile_runs r USING (run_id)
 ORDER BY w.consumer, w.topic, w.seq_to DESC
 LIMIT %(limit)s
"""
RUN_SUMMARY = """SELECT consumer, topic, status, count - revised, remaining, example_seqs
                   FROM reconcile_summary WHERE run_id = %(run_id)s ORDER BY 1, 2, 3"""
LATEST_RUN_SINCE = """SELECT run_id FROM pipeline_runs WHERE updated_at >= %(since)s
                       ORDER BY updated_at DESC LIMIT 1"""
# Net verdicts of every committed reconcile run: what a full audit must reproduce.
# Pruned runs' verdicts are in reconcile_summary_pruned (``run_retention``).
CUMULATIVE = """
SELECT consumer, topic, status, sum(net)::bigint FROM (
    SELECT s.consumer, s.topic, s.status, s.count - s.revised AS net
      FROM reconcile_summary s JOIN reconcile_runs r USING (run_id)
     WHERE r.warehouse = %(warehouse)s
    UNION ALL
    SELECT consumer, topic, status, net FROM reconcile_summary_pruned
     WHERE warehouse = %(warehouse)s
) verdicts
 GROUP BY 1, 2, 3 HAVING sum(net) <> 0
"""
PROGRESS = """
SELECT DISTINCT ON (w.consumer, w.topic) w.consumer, w.topic, w.start_seq, w.seq_to,
       w.filter_node
  FROM reconcile_windows w JOIN reconcile_runs r USING (run_id)
 WHERE r.warehouse = %(warehouse)s AND w.run_id <> %(run_id)s
 ORDER BY w.consumer, w.topic, w.seq_to DESC
"""
LAST_BATCH = """SELECT coalesce(max(batch_to), 0) FROM reconcile_runs
                 WHERE warehouse = %(warehouse)s AND run_id <> %(run_id)s"""
LATER_RUNS = """SELECT run_id FROM reconcile_runs
                 WHERE warehouse = %(warehouse)s AND run_id <> %(run_id)s AND recorded_at > (
                       SELECT recorded_at FROM reconcile_runs WHERE run_id = %(run_id)s)
                 ORDER BY recorded_at"""
FORGET_RECONCILE = [
    "DELETE FROM reconcile_summary WHERE run_id = %(run_id)s",
    "DELETE FROM reconcile_runs WHERE run_id = %(run_id)s",
]
INSERT_RUN = """INSERT INTO reconcile_runs (run_id, warehouse, batch_from, batch_to, repairs_open)
                VALUES (%(run_id)s, %(warehouse)s, %(batch_from)s, %(batch_to)s,
                        %(repairs_open)s)"""
INSERT_WINDOW = """INSERT INTO reconcile_windows
                   (run_id, consumer, topic, start_seq, seq_from, seq_to, filter_node)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)"""
INSERT_SUMMARY = """INSERT INTO reconcile_summary (run_id, consumer, topic, status, count, revised)
                    VALUES (%s, %s, %s, %s, %s, %s)"""
# A digest's range lies in one block of DIGEST_BUCKET seqs (seq // DIGEST_BUCKET), in Spark
# (spark_jobs.steps.reconcile.rewind) and here.
DIGEST_BUCKET = 1024
# The digest of a range's records (``protocol.hashes``): reconcile computes it in Spark for the
# ranges it judges (spark_jobs.steps.reconcile.rewind), a later run here.
RANGE_DIGEST = hashes.sql_range_digest("r.seq", "r.data::text")
SOURCE_HEADS = "SELECT name, head_seq FROM topics WHERE name = ANY(%(topics)s)"
# Stored digests meeting any (topic, lo, hi) span (inclusive), with the range's digest now.
# Each (topic, lo, hi) range's digest now and its record count, in the order given (source).
RANGES_NOW = f"""
SELECT h.now, h.n
  FROM unnest(%(topics)s::text[], %(los)s::bigint[], %(his)s::bigint[])
       WITH ORDINALITY AS s(topic, lo, hi, i)
 CROSS JOIN LATERAL (SELECT {RANGE_DIGEST} AS now, count(*) AS n FROM records r
                      WHERE r.topic = s.topic AND r.seq BETWEEN s.lo AND s.hi) h
 ORDER BY s.i
"""
DIGESTS_MEETING = """
SELECT d.topic, d.seq_from, d.seq_to, d.digest
  FROM reconcile_digests d
 WHERE d.warehouse = %(warehouse)s AND EXISTS (
       SELECT 1 FROM unnest(%(topics)s::text[], %(los)s::bigint[], %(his)s::bigint[])
                  AS s(topic, lo, hi)
        WHERE d.topic = s.topic AND d.seq_to >= s.lo AND d.seq_from <= s.hi)
"""
# Each topic's stored range that reaches highest: the top of what the pipeline verified of it.
TOP_RANGES = """
SELECT t.topic, d.seq_from, d.seq_to
  FROM unnest(%(topics)s::text[]) AS t(topic)
 CROSS JOIN LATERAL (SELECT seq_from, seq_to FROM reconcile_digests d
                      WHERE d.warehouse = %(warehouse)s AND d.topic = t.topic
                      ORDER BY d.seq_to DESC LIMIT 1) d
"""
# The stored ranges of one topic below a seq, highest first.
RANGES_BELOW = """SELECT seq_from, seq_to, digest FROM reconcile_digests
                   WHERE warehouse = %(warehouse)s AND topic = %(topic)s AND seq_to < %(below)s
                   ORDER BY seq_to DESC LIMIT %(limit)s"""
UPSERT_DIGEST = """INSERT INTO reconcile_digests
                   (warehouse, topic, seq_from, seq_to, digest, run_id)
                   VALUES (%s, %s, %s, %s, %s, %s)
                   ON CONFLICT (warehouse, topic, seq_from, seq_to)
                   DO UPDATE SET digest = excluded.digest, run_id = excluded.run_id"""
DROP_DIGEST = """DELETE FROM reconcile_digests
                  WHERE warehouse = %s AND topic = %s AND seq_from = %s AND seq_to = %s"""
COMMITTED_RUNS = "SELECT run_id FROM reconcile_runs WHERE warehouse = %(warehouse)s"
RUN_ORDER = """SELECT run_id, batch_to, recorded_at FROM reconcile_runs
                WHERE warehouse = %(warehouse)s"""
MOVE_WAREHOUSE = """UPDATE reconcile_runs SET warehouse = %(new)s WHERE warehouse = %(old)s"""
OPEN_REPAIRS = """SELECT run_id FROM reconcile_runs
                   WHERE warehouse = %(warehouse)s AND repairs_open AND run_id <> %(run_id)s
                   ORDER BY batch_to"""
SET_REPAIRS_OPEN = """UPDATE reconcile_runs SET repairs_open = %(open)s
                       WHERE run_id = ANY(%(run_ids)s)"""
RESET_REMAINING = """UPDATE reconcile_summary SET remaining = 0, example_seqs = '{}'
                      WHERE run_id = %(run_id)s AND status = ANY(%(defects)s)"""
SET_REMAINING = """UPDATE reconcile_summary SET remaining = %s, example_seqs = %s
                    WHERE run_id = %s AND consumer = %s AND topic = %s AND status = %s"""


def _dicts(cur: Any) -> list[dict[str, Any]]:
    """A cursor's rows as dicts by column name."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def _execute(conn: Any, sql: str, params: Any = None) -> Any:
    cur = conn.cursor()
    cur.execute(sql, params)
    return cur


def start_run(conn: Any, run_id: str, warehouse: str | None = None) -> None:
    """Mark ``run_id`` (of ``warehouse``, a catalog name) running, forgetting the figures and
    the failure an earlier attempt of it recorded."""
    _execute(conn, START_RUN, {"run_id": run_id, "warehouse": warehouse})


def record_step(conn: Any, run_id: str, step: str, figures: Mapping[str, object]) -> None:
    """Merge one step's figures (seconds, counts) into the run's ``steps``."""
    _execute(
        conn,
        RECORD_STEP,
        {"run_id": run_id, "step": json.dumps({step: dict(figures)}, default=str)},
    )


def record_snapshots(conn: Any, run_id: str, warehouse: str, snapshots: Mapping[str, int]) -> None:
    """Merge the tables' snapshot ids a run left into its ``pipeline_runs`` row."""
    _execute(
        conn,
        RECORD_SNAPSHOTS,
        {"run_id": run_id, "warehouse": warehouse, "snapshots": json.dumps(dict(snapshots))},
    )


def run_snapshots(conn: Any, run_id: str) -> tuple[str | None, dict[str, int], Any] | None:
    """(warehouse, {table: snapshot id}, finished_at) of a run, or None when unknown."""
    row = _execute(conn, RUN_SNAPSHOTS, {"run_id": run_id}).fetchone()
    if row is None:
        return None
    snaps = row[1] if isinstance(row[1], dict) else json.loads(row[1] or "{}")
    return row[0], {k: int(v) for k, v in snaps.items()}, row[2]


def referenced_snapshots(conn: Any, warehouse: str, since: Any) -> dict[str, set[int]]:
    """Per table, the snapshot ids runs started since ``since`` reference."""
    out: dict[str, set[int]] = {}
    for (snaps,) in _execute(conn, REFERENCED_SNAPSHOTS, {"warehouse": warehouse, "since": since}):
        value = snaps if isinstance(snaps, dict) else json.loads(snaps or "{}")
        for table, snap in value.items():
            out.setdefault(table, set()).add(int(snap))
    return out


def run_batches(conn: Any, run_id: str) -> tuple[int, int] | None:
    """The delivery batches a committed reconcile run read, or None."""
    row = _execute(conn, RUN_BATCHES, {"run_id": run_id}).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def mark_failed(
    conn: Any, run_id: str, step: str, reason: str, warehouse: str | None = None
) -> None:
    """``step`` failed for good (``reason``: one line): the run ends ``failed``, keeping the
    defect figures a failed gate recorded."""
    params = {"run_id": run_id, "step": step, "reason": reason, "warehouse": warehouse}
    _execute(conn, FAIL_RUN, params)


def run_failure(conn: Any, run_id: str) -> tuple[str | None, str | None] | None:
    """(failed_step, failure_reason) of a run, or None when unknown."""
    row = _execute(conn, GET_FAILURE, {"run_id": run_id}).fetchone()
    return None if row is None else (row[0], row[1])


def finish_run(conn: Any, run_id: str, passed: bool, found: int, remaining: int) -> None:
    _execute(
        conn,
        FINISH_RUN,
        {
            "run_id": run_id,
            "status": "passed" if passed else "failed",
            "found": found,
            "remaining": remaining,
        },
    )


def run_findings(conn: Any, run_id: str) -> tuple[str | None, bool, bool | None] | None:
    """(warehouse, verified, repairs_open) of a run (``RUN_FINDINGS``), or None when unknown."""
    row = _execute(conn, RUN_FINDINGS, {"run_id": run_id}).fetchone()
    return None if row is None else (row[0], bool(row[1]), row[2])


def get_run(conn: Any, run_id: str) -> tuple | None:
    """(status, defects_found, defects_remaining, steps) of a run, or None."""
    return _execute(conn, GET_RUN, {"run_id": run_id}).fetchone()


def latest_run_since(conn: Any, since: Any) -> str | None:
    row = _execute(conn, LATEST_RUN_SINCE, {"since": since}).fetchone()
    return None if row is None else row[0]


def recent_runs(conn: Any, limit: int = 20) -> list[dict[str, Any]]:
    """Newest runs first: one dict per (run, consumer, topic, status) with its net count and
    ``rewound``, the topic's rewound ranges the run's reconcile found (``[[a, b], …]`` or None)."""
    return _dicts(_execute(conn, RECENT_RUNS, {"limit": limit}))


def consumer_progress(conn: Any, limit: int = 500, source: Any = None) -> list[dict[str, Any]]:
    """(consumer, topic, reconciled_through, head_seq, recorded_at) per consumer and topic; the
    heads read from ``source`` (default: ``conn``, one database for both)."""
    rows = _dicts(_execute(conn, CONSUMER_PROGRESS, {"limit": limit}))
    heads = source_heads(conn if source is None else source, {r["topic"] for r in rows})
    return [
        {
            "consumer": r["consumer"],
            "topic": r["topic"],
            "reconciled_through": r["reconciled_through"],
            "head_seq": heads.get(r["topic"]),
            "recorded_at": r["recorded_at"],
        }
        for r in rows
    ]


def run_summary(conn: Any, run_id: str) -> list[tuple]:
    """(consumer, topic, status, net count, remaining, example_seqs) rows of one run."""
    return [tuple(r) for r in _execute(conn, RUN_SUMMARY, {"run_id": run_id}).fetchall()]


def cumulative_summary(conn: Any, warehouse: str) -> dict[tuple[str, str, str], int]:
    """Net count per (consumer, topic, status) over the warehouse's reconcile runs."""
    return {
        (c, t, s): int(n)
        for c, t, s, n in _execute(conn, CUMULATIVE, {"warehouse": warehouse}).fetchall()
    }


def later_runs(conn: Any, warehouse: str, run_id: str) -> list[str]:
    """The warehouse's runs reconciled after ``run_id`` (none when it never reconciled)."""
    key = {"warehouse": warehouse, "run_id": run_id}
    return [r[0] for r in _execute(conn, LATER_RUNS, key).fetchall()]


def rerun_refusal(run_id: str, later: Sequence[str]) -> str:
    """Why ``run_id`` is not re-run (a backfill of a past interval, a cleared old run): its
    windows are seq ranges that later runs continued from, so redoing it would judge their
    seqs twice or move the windows back (pure)."""
    shown = ", ".join(later[:3]) + (f" and {len(later) - 3} more" if len(later) > 3 else "")
    return (
        f"reconcile run {run_id} cannot be re-run: later runs built on it ({shown}); its seqs "
        f"are judged and the newest run continues from them, so there is nothing to backfill"
    )


def reconcile_state(conn: Any, warehouse: str, run_id: str) -> tuple[int, list[tuple]]:
    """What the warehouse's runs other than ``run_id`` committed: (highest delivery batch
    read, progress rows (consumer, topic, start_seq, reconciled_through, filter_node)).
    Refuses to redo a run that later runs built on."""
    key = {"warehouse": warehouse, "run_id": run_id}
    later = later_runs(conn, warehouse, run_id)
    if later:
        raise ValueError(rerun_refusal(run_id, later))
    last = int(_execute(conn, LAST_BATCH, key).fetchone()[0])
    return last, [tuple(r) for r in _execute(conn, PROGRESS, key).fetchall()]


def commit_reconcile(
    conn: Any,
    warehouse: str,
    run_id: str,
    batches: tuple[int, int],
    repairs_open: bool,
    windows: Iterable[Sequence],
    summary: Iterable[Sequence],
) -> None:
    """Replace the run's windows and summary: windows are (consumer, topic, start_seq,
    seq_from, seq_to, filter_node), summary rows (consumer, topic, status, count, revised).
    Call inside one transaction."""
    for sql in FORGET_RECONCILE:
        _execute(conn, sql, {"run_id": run_id})
    _execute(
        conn,
        INSERT_RUN,
        {
            "run_id": run_id,
            "warehouse": warehouse,
            "batch_from": batches[0],
            "batch_to": batches[1],
            "repairs_open": repairs_open,
        },
    )
    cur = conn.cursor()
    cur.executemany(INSERT_WINDOW, [(run_id, *w) for w in windows])
    cur.executemany(INSERT_SUMMARY, [(run_id, *s) for s in summary])


def source_heads(conn: Any, topics: Iterable[str]) -> dict[str, int]:
    """Each topic's ``head_seq`` now (topics never created are absent)."""
    cur = _execute(conn, SOURCE_HEADS, {"topics": sorted(set(topics))})
    return {name: int(head) for name, head in cur.fetchall()}


def ranges_now(source: Any, ranges: Sequence[tuple[str, int, int]]) -> list[tuple[str | None, int]]:
    """(digest now or None, records now) of each (topic, lo, hi) range, in order (source)."""
    if not ranges:
        return []
    params = {
        "topics": [t for t, _, _ in ranges],
        "los": [lo for _, lo, _ in ranges],
        "his": [hi for _, _, hi in ranges],
    }
    return [(r[0], int(r[1])) for r in _execute(source, RANGES_NOW, params).fetchall()]


def digests_meeting(
    conn: Any, warehouse: str, spans: Iterable[tuple[str, int, int]], source: Any = None
) -> list[tuple[str, int, int, str, str | None]]:
    """(topic, seq_from, seq_to, digest as judged, digest now or None) of the stored ranges
    meeting any (topic, lo, hi) span (inclusive); re-hashed in ``source`` (default: ``conn``,
    one database for both)."""
    spans = list(spans)
    if not spans:
        return []
    params = {
        "warehouse": warehouse,
        "topics": [t for t, _, _ in spans],
        "los": [lo for _, lo, _ in spans],
        "his": [hi for _, _, hi in spans],
    }
    stored = [tuple(r) for r in _execute(conn, DIGESTS_MEETING, params).fetchall()]
    now = ranges_now(conn if source is None else source, [(t, a, b) for t, a, b, _ in stored])
    return [(t, a, b, d, digest) for (t, a, b, d), (digest, _) in zip(stored, now, strict=True)]


def top_ranges(conn: Any, warehouse: str, topics: Iterable[str]) -> list[tuple[str, int, int]]:
    """(topic, seq_from, seq_to) of each topic's highest stored range (one indexed read per
    topic: ``reconcile_digests_reach``)."""
    params = {"warehouse": warehouse, "topics": sorted(set(topics))}
    return [(t, int(a), int(b)) for t, a, b in _execute(conn, TOP_RANGES, params).fetchall()]


def ranges_below(
    conn: Any, warehouse: str, topic: str, below: int, limit: int
) -> list[tuple[int, int, str]]:
    """(seq_from, seq_to, digest) of up to ``limit`` stored ranges of ``topic`` ending below
    ``below``, highest first."""
    params = {"warehouse": warehouse, "topic": topic, "below": below, "limit": limit}
    return [(int(a), int(b), d) for a, b, d in _execute(conn, RANGES_BELOW, params).fetchall()]


def store_digests(
    conn: Any,
    warehouse: str,
    run_id: str,
    digests: Iterable[tuple[str, int, int, str | None]],
) -> None:
    """Upsert (topic, seq_from, seq_to, digest) rows; a None digest (the range holds no
    record any more) drops the row. Call inside the run's commit transaction."""
    rows = list(digests)
    cur = conn.cursor()
    keep = [(warehouse, t, a, b, d, run_id) for t, a, b, d in rows if d is not None]
    drop = [(warehouse, t, a, b) for t, a, b, d in rows if d is None]
    if keep:
        cur.executemany(UPSERT_DIGEST, keep)
    if drop:
        cur.executemany(DROP_DIGEST, drop)


def committed_runs(conn: Any, warehouse: str) -> set[str]:
    return {r[0] for r in _execute(conn, COMMITTED_RUNS, {"warehouse": warehouse}).fetchall()}


def run_order(conn: Any, warehouse: str) -> dict[str, tuple[int, Any]]:
    """(batch_to, recorded_at) of each of the warehouse's committed reconcile runs."""
    return {
        r[0]: (int(r[1]), r[2])
        for r in _execute(conn, RUN_ORDER, {"warehouse": warehouse}).fetchall()
    }


def move_warehouse(conn: Any, old: str, new: str) -> None:
    """Key the runs of warehouse ``old`` by ``new`` (a converted warehouse keeps its
    incremental progress). Idempotent."""
    _execute(conn, MOVE_WAREHOUSE, {"old": old, "new": new})


def open_repairs(conn: Any, warehouse: str, run_id: str) -> list[str]:
    """The warehouse's earlier runs whose repairable defects no verify saw repaired yet."""
    return [
        r[0]
        for r in _execute(conn, OPEN_REPAIRS, {"warehouse": warehouse, "run_id": run_id}).fetchall()
    ]


def record_verify(
    conn: Any,
    run_id: str,
    report: Iterable[Sequence],
    defects: Sequence[str],
    carried: Sequence[str],
    carried_left: int,
    still_open: Sequence[str],
) -> bool:
    """Store what verify found and finish the run; returns whether it passed.

    ``report`` rows are (consumer, topic, status, found, remaining, example_seqs) of this run's
    defects; its defect rows not in it had nothing left. ``carried`` are earlier runs with open
    repairs that this verify re-checked, ``carried_left`` their repairable seqs still missing
    (they fail this run's gate too), ``still_open`` the runs (this one included) whose
    repairable defects remain. Call inside one transaction."""
    report = [tuple(r) for r in report]
    _execute(conn, RESET_REMAINING, {"run_id": run_id, "defects": list(defects)})
    conn.cursor().executemany(
        SET_REMAINING, [(r[4], list(r[5] or []), run_id, *r[:3]) for r in report]
    )
    _execute(conn, SET_REPAIRS_OPEN, {"open": False, "run_ids": [run_id, *carried]})
    _execute(conn, SET_REPAIRS_OPEN, {"open": True, "run_ids": list(still_open)})
    remaining = sum(int(r[4]) for r in report) + carried_left
    finish_run(conn, run_id, remaining == 0, sum(int(r[3]) for r in report), remaining)
    return remaining == 0
