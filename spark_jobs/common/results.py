"""The pipeline's PostgreSQL result tables (migration 003): ``pipeline_runs`` and
``reconcile_summary``. Every write is an idempotent upsert keyed by run_id, so a step rerun
with the same run_id replaces what it wrote before. Rows arrive already collected on the
driver (they are small: one per consumer, topic and status)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import psycopg
from psycopg.types.json import Jsonb

from spark_jobs.common.statuses import DEFECTS

START_RUN = """
INSERT INTO pipeline_runs (run_id) VALUES (%(run_id)s)
ON CONFLICT (run_id) DO UPDATE
   SET status = 'running', started_at = now(), updated_at = now(), finished_at = NULL,
       steps = '{}'::jsonb, defects_found = NULL, defects_remaining = NULL
"""

RECORD_STEP = """
INSERT INTO pipeline_runs (run_id, steps) VALUES (%(run_id)s, %(step)s)
ON CONFLICT (run_id) DO UPDATE
   SET steps = pipeline_runs.steps || excluded.steps, updated_at = now()
"""

FINISH_RUN = """
UPDATE pipeline_runs
   SET status = %(status)s, defects_found = %(found)s, defects_remaining = %(remaining)s,
       finished_at = now(), updated_at = now()
 WHERE run_id = %(run_id)s
"""

INSERT_SUMMARY = """
INSERT INTO reconcile_summary (run_id, consumer, topic, status, count)
VALUES (%s, %s, %s, %s, %s)
"""

RESET_REMAINING = """
UPDATE reconcile_summary SET remaining = 0, example_seqs = '{}'
 WHERE run_id = %(run_id)s AND status = ANY(%(defects)s)
"""

SET_REMAINING = """
UPDATE reconcile_summary SET remaining = %s, example_seqs = %s
 WHERE run_id = %s AND consumer = %s AND topic = %s AND status = %s
"""


def start_run(url: str, run_id: str) -> None:
    """Mark ``run_id`` running, forgetting what an earlier attempt of it recorded."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(START_RUN, {"run_id": run_id})


def record_step(url: str, run_id: str, step: str, figures: Mapping[str, object]) -> None:
    """Merge one step's figures (seconds, counts) into the run's ``steps``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RECORD_STEP, {"run_id": run_id, "step": Jsonb({step: dict(figures)})})


def mark_failed(url: str, run_id: str) -> None:
    """A step could not run: the run ends ``failed`` without defect figures."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FINISH_RUN, {"run_id": run_id, "status": "failed", "found": None,
                                  "remaining": None})


def replace_summary(url: str, run_id: str, rows: Iterable[Sequence]) -> int:
    """Replace the run's summary rows: (run_id, consumer, topic, status, count) tuples."""
    rows = [tuple(r) for r in rows]
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("DELETE FROM reconcile_summary WHERE run_id = %s", (run_id,))
        with conn.cursor() as cur:
            cur.executemany(INSERT_SUMMARY, rows)
    return len(rows)


def record_verify(url: str, run_id: str, report: Iterable[Sequence], passed: bool) -> None:
    """Store what verify found: ``report`` rows are (consumer, topic, status, found,
    remaining, example_seqs); defect rows not in it had nothing left."""
    report = [tuple(r) for r in report]
    found = sum(int(r[3]) for r in report)
    remaining = sum(int(r[4]) for r in report)
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute(RESET_REMAINING, {"run_id": run_id, "defects": list(DEFECTS)})
        with conn.cursor() as cur:
            cur.executemany(SET_REMAINING, [(r[4], list(r[5] or []), run_id, r[0], r[1], r[2])
                                            for r in report])
        conn.execute(FINISH_RUN, {"run_id": run_id, "status": "passed" if passed else "failed",
                                  "found": found, "remaining": remaining})
