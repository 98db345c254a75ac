"""Which runs of a warehouse are pruned, and forgetting them in the run tables (migration 025).

A warehouse keeps its newest ``keep`` runs (by start; a run known only to ``reconcile_runs``,
as steps called without a start leave it, by its reconcile commit). Older runs are pruned,
except the current one and those a later run still needs:

* a run with open repairs (``repairs_open``): backfill and verify carry them forward;
* a run holding a consumer's and topic's newest window: ``reconciled_through`` and
  ``start_seq`` are read from it (``runs.PROGRESS``), and a quiet topic's newest window may be
  months old.

Forgetting a run deletes its ``pipeline_runs``, ``reconcile_runs`` (its ``reconcile_windows``
with it) and ``reconcile_summary`` rows, after adding its net verdicts to
``reconcile_summary_pruned``, so the cumulative summary a full audit must reproduce is
unchanged. ``alerts_sent`` rows older than the oldest kept run go too (keyed by Airflow's run
ids).

``reconcile_digests`` are the latest judged digest of each seq range, whatever run judged it,
and the rewind check compares the source with them. Each run adds a partial range to every
block (``runs.DIGEST_BUCKET`` seqs) it judged, so forgetting runs bounds them two ways:

* the blocks a pruned run judged are merged into one range each (:func:`merge_plan`) when
  every partial range still hashes as judged and the source holds no record between them:
  the merged digest, hashed now, is then exactly the digest of what was judged. A block with a
  changed range stays as it is (it is evidence for the next run);
* ranges wholly below their topic's ``earliest_seq`` (trimmed by retention or deletion) go: a
  trimmed seq is never rewound, so such a range is never evidence.

So the table holds about one row per retained block plus the kept runs' partial ranges.

Every query reads the warehouse's runs, which pruning bounds to ``keep`` plus the protected
ones, so a prune costs what it deletes, not the history. Functions take a DB-API connection to
the pipeline's database and never commit: call :func:`forget` inside one transaction; what it
reads of the source (digests now, ``earliest_seq``) comes from ``source`` (default: the same
connection, one database for both).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from watch_service.store.runs import DIGEST_BUCKET, RANGE_DIGEST, ranges_now

# The warehouse's runs, newest first, with whether a later run needs them.
RUNS_BY_AGE = """
WITH known AS (
    SELECT coalesce(p.run_id, r.run_id) AS run_id,
           coalesce(p.started_at, r.recorded_at) AS at,
           coalesce(r.repairs_open, false) AS repairs_open
      FROM (SELECT run_id, started_at FROM pipeline_runs WHERE warehouse = %(warehouse)s) p
      FULL JOIN (SELECT run_id, recorded_at, repairs_open FROM reconcile_runs
                  WHERE warehouse = %(warehouse)s) r USING (run_id)
)
SELECT k.run_id, k.at, k.repairs_open,
       k.run_id IN (SELECT run_id FROM reconcile_progress WHERE warehouse = %(warehouse)s)
  FROM known k
 ORDER BY k.at DESC, k.run_id DESC
"""
ROLL_UP = """
INSERT INTO reconcile_summary_pruned (warehouse, consumer, topic, status, net)
SELECT %(warehouse)s, consumer, topic, status, sum(count - revised)
  FROM reconcile_summary WHERE run_id = ANY(%(run_ids)s)
 GROUP BY consumer, topic, status
ON CONFLICT (warehouse, consumer, topic, status)
DO UPDATE SET net = reconcile_summary_pruned.net + excluded.net
"""
FORGET = [
    "DELETE FROM reconcile_summary WHERE run_id = ANY(%(run_ids)s)",
    """DELETE FROM reconcile_runs
        WHERE run_id = ANY(%(run_ids)s) AND warehouse = %(warehouse)s""",
    "DELETE FROM pipeline_runs WHERE run_id = ANY(%(run_ids)s)",
]
FORGET_ALERTS = "DELETE FROM alerts_sent WHERE sent_at < %(before)s"
# Every range in the blocks the pruned runs judged, with its digest now and its record count.
DIGEST_BLOCKS = f"""
WITH blocks AS (
    SELECT DISTINCT topic, seq_from / {DIGEST_BUCKET} AS block FROM reconcile_digests
     WHERE warehouse = %(warehouse)s AND run_id = ANY(%(run_ids)s)
)
SELECT d.topic, d.seq_from, d.seq_to, d.digest, d.run_id
  FROM reconcile_digests d
  JOIN blocks b ON d.topic = b.topic AND d.seq_from / {DIGEST_BUCKET} = b.block
 WHERE d.warehouse = %(warehouse)s
 ORDER BY d.topic, d.seq_from
"""
UNION_DIGEST = f"""SELECT {RANGE_DIGEST}, count(*) FROM records r
                    WHERE r.topic = %(topic)s AND r.seq BETWEEN %(lo)s AND %(hi)s"""
DROP_RANGES = """DELETE FROM reconcile_digests
                  WHERE warehouse = %(warehouse)s AND topic = %(topic)s
                    AND seq_from BETWEEN %(lo)s AND %(hi)s"""
INSERT_RANGE = """INSERT INTO reconcile_digests
                  (warehouse, topic, seq_from, seq_to, digest, run_id)
                  VALUES (%(warehouse)s, %(topic)s, %(lo)s, %(hi)s, %(digest)s, %(run_id)s)"""
DIGEST_TOPICS = "SELECT DISTINCT topic FROM reconcile_digests WHERE warehouse = %(warehouse)s"
EARLIEST = "SELECT name, earliest_seq FROM topics WHERE name = ANY(%(topics)s::text[])"
FORGET_TRIMMED = """DELETE FROM reconcile_digests d
                     USING unnest(%(topics)s::text[], %(earliest)s::bigint[]) AS t(name, earliest)
                     WHERE d.warehouse = %(warehouse)s AND d.topic = t.name
                       AND d.seq_to < t.earliest"""
# (topic, seq_from, seq_to, digest as judged, digest now, run_id, records now)
Part = tuple[str, int, int, str, str | None, str, int]


def choose(
    runs_by_age: Sequence[tuple[str, Any, bool, bool]], keep: int, current: str
) -> tuple[list[str], Any]:
    """(the runs to prune, the start of the oldest run kept) from the warehouse's runs newest
    first, each (run_id, at, repairs_open, holds a newest window) (pure)."""
    pruned: list[str] = []
    oldest_kept = None
    for rank, (run_id, at, repairs_open, holds_window) in enumerate(runs_by_age):
        if rank < keep or run_id == current or repairs_open or holds_window:
            oldest_kept = at
        else:
            pruned.append(run_id)
    return pruned, oldest_kept


def runs_by_age(conn: Any, warehouse: str) -> list[tuple[str, Any, bool, bool]]:
    cur = conn.cursor()
    cur.execute(RUNS_BY_AGE, {"warehouse": warehouse})
    return [(r[0], r[1], bool(r[2]), bool(r[3])) for r in cur.fetchall()]


def forget(
    conn: Any, warehouse: str, run_ids: Sequence[str], oldest_kept: Any, source: Any = None
) -> None:
    """Delete the run tables' rows of ``run_ids``, their verdicts rolled up first, and the
    alerts sent before ``oldest_kept`` (None: none). Call inside one transaction."""
    source = conn if source is None else source
    if not run_ids:
        return
    key = {"warehouse": warehouse, "run_ids": list(run_ids)}
    cur = conn.cursor()
    cur.execute(ROLL_UP, key)
    for sql in FORGET:
        cur.execute(sql, key)
    if oldest_kept is not None:
        cur.execute(FORGET_ALERTS, {"before": oldest_kept})
    merge_digests(conn, warehouse, run_ids, source)
    forget_trimmed(conn, warehouse, source)


def forget_trimmed(conn: Any, warehouse: str, source: Any) -> None:
    """Drop the ranges wholly below their topic's ``earliest_seq`` in the source."""
    cur = conn.cursor()
    cur.execute(DIGEST_TOPICS, {"warehouse": warehouse})
    topics = [r[0] for r in cur.fetchall()]
    if not topics:
        return
    read = source.cursor()
    read.execute(EARLIEST, {"topics": topics})
    earliest = read.fetchall()
    cur.execute(
        FORGET_TRIMMED,
        {
            "warehouse": warehouse,
            "topics": [t for t, _ in earliest],
            "earliest": [int(e) for _, e in earliest],
        },
    )


def merge_plan(parts: Sequence[Part]) -> list[tuple[str, int, int, str, int]]:
    """(topic, lo, hi, run_id, records) of each block to merge into one range, from its ranges
    sorted by (topic, seq_from): a block of two or more ranges that all hash now as judged and
    do not overlap. ``run_id`` is the run that judged the highest range; ``records`` the count
    the merged range must hold now (more means a record between the ranges) (pure)."""
    blocks: dict[tuple[str, int], list[Part]] = {}
    for part in parts:
        blocks.setdefault((part[0], part[1] // DIGEST_BUCKET), []).append(part)
    plan = []
    for (topic, _), ranges in blocks.items():
        unchanged = all(now == digest for _, _, _, digest, now, _, _ in ranges)
        apart = all(a[2] < b[1] for a, b in pairwise(ranges))
        if len(ranges) > 1 and unchanged and apart:
            records = sum(p[6] for p in ranges)
            plan.append((topic, ranges[0][1], ranges[-1][2], ranges[-1][5], records))
    return plan


def merge_digests(conn: Any, warehouse: str, run_ids: Sequence[str], source: Any = None) -> int:
    """Merge the partial ranges of the blocks ``run_ids`` judged (:func:`merge_plan`); returns
    the blocks merged. Call inside the prune's transaction."""
    source = conn if source is None else source
    cur = conn.cursor()
    cur.execute(DIGEST_BLOCKS, {"warehouse": warehouse, "run_ids": list(run_ids)})
    stored = [(r[0], int(r[1]), int(r[2]), r[3], r[4]) for r in cur.fetchall()]
    now = ranges_now(source, [(t, a, b) for t, a, b, _, _ in stored])
    parts = [(t, a, b, d, h, run, n) for (t, a, b, d, run), (h, n) in zip(stored, now, strict=True)]
    merged = 0
    read = source.cursor()
    for topic, lo, hi, run_id, records in merge_plan(parts):
        key = {"warehouse": warehouse, "topic": topic, "lo": lo, "hi": hi}
        read.execute(UNION_DIGEST, key)
        digest, count = read.fetchone()
        if digest is None or count != records:
            continue  # a record between the ranges: the union is not what was judged
        cur.execute(DROP_RANGES, key)
        cur.execute(INSERT_RANGE, {**key, "digest": digest, "run_id": run_id})
        merged += 1
    return merged
