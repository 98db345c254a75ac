"""One pipeline run's life, the same from ``auditsync pipeline run`` and from the DAG.

* :func:`start` — the run is ``running`` (a re-run of its id forgets what an earlier attempt
  recorded, its failure included);
* the run **finishes** in verify's commit: ``runs.record_verify`` stores ``passed``, or
  ``failed`` with the defects left, in the transaction that stores what verify found;
* :func:`fail` — a step failed for good: ``failed``, with the step and a one-line reason
  (:func:`one_line`). The runner calls it when a step raises; the DAG from every task's
  failure callback, which Airflow calls only once no retry is left;
* :func:`prune` — after a run, the runs beyond the newest ``keep`` lose their per-run rows: the
  Iceberg partitions of ``PRUNED_TABLES`` (a metadata-only delete through pyiceberg: the files
  go when maintenance expires the snapshots that held them) and then their run-table rows
  (``watch_service.store.run_retention``, which says which runs are never pruned). Their
  ``ledger`` rows move, in one commit, into one partition (``tables.PRUNED_LEDGER``) that
  reconcile reads with the kept runs', since late copies are judged against them: the ledger
  keeps every verdict but no longer a partition per run (maintenance compacts that
  partition's files). Both are ``Warehouse.delete_runs``. The runner calls it after its
  steps, the DAG from its ``finish_run`` teardown.

``keep`` is ``AUDITSYNC_KEEP_RUNS`` (:func:`keep_runs`, default 96: a day of 15-minute runs).
Deleting a run's rows leaves the snapshots that kept runs reference, so time travel of every
kept run works. Nothing here starts a JVM: the Airflow task that prunes needs no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_jobs.warehouse.layout import Layout
from watch_service.settings import SettingsError
from watch_service.store import run_retention, runs

KEEP_RUNS = 96  # a day of 15-minute runs
KEEP_RUNS_ENV = "AUDITSYNC_KEEP_RUNS"
PRUNED_TABLES = ("detail", "summary", "remaining")
REASON_CHARS = 300


def keep_runs(env: Mapping[str, str]) -> int:
    """``AUDITSYNC_KEEP_RUNS`` from ``env`` (default :data:`KEEP_RUNS`): a whole number ≥ 1."""
    raw = env.get(KEEP_RUNS_ENV, "").strip()
    if not raw:
        return KEEP_RUNS
    return check_keep(raw, KEEP_RUNS_ENV)


def check_keep(raw: object, name: str) -> int:
    """``raw`` as a run count, or a ``SettingsError`` naming ``name`` (pure)."""
    try:
        value = int(str(raw))
    except ValueError:
        raise SettingsError(f"{name}: expected a whole number of runs, got {raw!r}") from None
    if value < 1:
        raise SettingsError(f"{name}: must keep at least 1 run (the current one), got {value}")
    return value


def one_line(error: BaseException | str) -> str:
    """A failure's reason on one line: the exception's type and the first non-empty line of
    its message, at most :data:`REASON_CHARS` characters (pure)."""
    if isinstance(error, BaseException):
        lines = [x.strip() for x in str(error).splitlines() if x.strip()]
        text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    else:
        text = next((x.strip() for x in error.splitlines() if x.strip()), "")
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def start(conn: Any, run_id: str, warehouse: str | None) -> None:
    """Mark the run ``running`` in ``pipeline_runs`` (``warehouse``: its catalog name)."""
    runs.start_run(conn, run_id, warehouse)


def fail(
    conn: Any, run_id: str, step: str, error: BaseException | str, warehouse: str | None = None
) -> None:
    """``step`` failed for good: the run is ``failed`` with the step and its reason."""
    runs.mark_failed(conn, run_id, step, one_line(error), warehouse)


def prune(database_url: str, layout: Layout, keep: int, source_url: str | None = None) -> list[str]:
    """Prune the warehouse's runs beyond the newest ``keep`` (never ``layout.run_id``); returns
    the run ids pruned, oldest last. ``database_url`` is the pipeline's database, ``source_url``
    the source's where apart (the digests are re-hashed there). The Iceberg partitions go
    first: a crash between the two leaves run rows whose partitions are gone, which the next
    prune deletes again (never partitions whose runs PostgreSQL forgot, which reconcile would
    report as unknown runs)."""
    from spark_jobs.common import store

    with store.connect(database_url) as conn:
        removed, oldest_kept = run_retention.choose(
            run_retention.runs_by_age(conn, layout.catalog), keep, layout.run_id
        )
        if not removed:
            return []
        committed = runs.committed_runs(conn, layout.catalog) & set(removed)
    from spark_jobs.warehouse.warehouse import Warehouse  # pyspark, no JVM

    Warehouse.open(layout, database_url).delete_runs(removed, committed, PRUNED_TABLES)
    with (
        store.connect(source_url or database_url) as source,
        store.connect(database_url, transaction=True) as conn,
    ):
        run_retention.forget(conn, layout.catalog, removed, oldest_kept, source)
    return removed
