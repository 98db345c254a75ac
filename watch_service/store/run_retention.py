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
unchanged. ``reconcile_digests`` are kept: each is the latest judged digest of a seq range,
not a run's, and the rewind check compares the source with them whatever run judged it.
``alerts_sent`` rows older than the oldest kept run go too (keyed by Airflow's run ids).

Every query reads the warehouse's runs, which pruning bounds to ``keep`` plus the protected
ones, so a prune costs what it deletes, not the history. Functions take a DB-API connection and
never commit: call :func:`forget` inside one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def forget(conn: Any, warehouse: str, run_ids: Sequence[str], oldest_kept: Any) -> None:
    """Delete the run tables' rows of ``run_ids``, their verdicts rolled up first, and the
    alerts sent before ``oldest_kept`` (None: none). Call inside one transaction."""
    if not run_ids:
        return
    key = {"warehouse": warehouse, "run_ids": list(run_ids)}
    cur = conn.cursor()
    cur.execute(ROLL_UP, key)
    for sql in FORGET:
        cur.execute(sql, key)
    if oldest_kept is not None:
        cur.execute(FORGET_ALERTS, {"before": oldest_kept})
