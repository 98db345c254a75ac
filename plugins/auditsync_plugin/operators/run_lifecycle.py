"""The run lifecycle (``spark_jobs.lifecycle``) as the audit_sync DAG drives it.

* ``start_run`` (:class:`~auditsync_plugin.operators.pipeline.StartRunOperator`) starts the run;
* :class:`RunFailed`, every pipeline task's failure callback, marks it ``failed`` with the
  task and its one-line reason. Airflow calls a failure callback only when the task failed for
  good: a transient fault with retries left goes ``up_for_retry`` and calls none;
* verify's commit finishes it (``passed`` or ``failed`` with the defects left);
* :class:`FinishRunOperator`, the teardown of ``start_run``, prunes the runs beyond the newest
  ``AUDITSYNC_KEEP_RUNS``, whatever the run's outcome.

Clearing a task of a run clears its setup too, so a re-tried run goes back to ``running``
through ``start_run`` and then to its outcome. The run tables are reached through
:class:`~auditsync_plugin.hooks.pipeline_runs.PipelineRunsHook`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.bases.notifier import BaseNotifier

from .. import connect_session as sessions

PG_CONN_ID = "auditsync_pg"
log = logging.getLogger(__name__)


def keep_runs(env: Mapping[str, str]) -> int:
    """``AUDITSYNC_KEEP_RUNS`` (default 96); a bad value fails the DAG file's import, naming
    the setting."""
    from spark_jobs.lifecycle import keep_runs as parse

    return parse(env)


class RunFailed(BaseNotifier):
    """Mark pipeline run ``pipeline_run_id`` failed, naming the failed task and its reason."""

    template_fields = ("pipeline_run_id", "warehouse")

    def __init__(
        self, *, pipeline_run_id: str, warehouse: str = "", pg_conn_id: str = PG_CONN_ID
    ) -> None:
        super().__init__()
        self.pipeline_run_id = pipeline_run_id
        self.warehouse = warehouse
        self.pg_conn_id = pg_conn_id

    def notify(self, context: Any) -> None:
        from spark_jobs.lifecycle import one_line

        from ..hooks.pipeline_runs import PipelineRunsHook

        step = str(context["ti"].task_id)
        reason = one_line(context.get("exception") or "failed")
        PipelineRunsHook(self.pg_conn_id).mark_failed(
            self.pipeline_run_id, step, reason, self.catalog()
        )
        log.info("pipeline run %s failed in %s: %s", self.pipeline_run_id, step, reason)

    def catalog(self) -> str | None:
        from spark_jobs.warehouse.layout import Layout

        return Layout("", self.warehouse, "").catalog if self.warehouse else None


def with_run_failed(
    callbacks: Mapping[str, Any], pipeline_run_id: str, warehouse: str
) -> dict[str, Any]:
    """``callbacks`` with :class:`RunFailed` first among its failure callbacks."""
    failed = RunFailed(pipeline_run_id=pipeline_run_id, warehouse=warehouse)
    extra = callbacks.get("on_failure_callback")
    others = [] if extra is None else list(extra) if isinstance(extra, Sequence) else [extra]
    return {**callbacks, "on_failure_callback": [failed, *others]}


class FinishRunOperator(BaseOperator):
    """Prune the warehouse's runs beyond the newest ``keep`` (``spark_jobs.lifecycle.prune``)
    and release the run's Spark Connect session ``connect_session`` ('': none); returns how
    many runs it pruned."""

    template_fields: Sequence[str] = ("run_id_value", "landing", "warehouse", "connect_session")
    ui_color = "#e8e8f4"

    def __init__(
        self,
        *,
        run_id_value: str,
        landing: str,
        warehouse: str,
        keep: int,
        pg_conn_id: str = PG_CONN_ID,
        connect_session: str = "",
        connect_conn_id: str | None = sessions.CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.run_id_value = run_id_value
        self.landing = landing
        self.warehouse = warehouse
        self.keep = keep
        self.pg_conn_id = pg_conn_id
        self.connect_session = connect_session
        self.connect_conn_id = connect_conn_id

    def execute(self, context: Any) -> int:
        try:
            return self.prune()
        finally:
            self.release_session()

    def release_session(self) -> None:
        from .spark_step import connect_url

        remote = connect_url(self.connect_conn_id) if self.connect_session else None
        if remote is not None:
            sessions.release(sessions.session_url(remote, self.connect_session))

    def prune(self) -> int:
        from spark_jobs import lifecycle
        from spark_jobs.warehouse.layout import Layout

        from ..hooks.pipeline_runs import database_url, pipeline_database_url

        layout = Layout(self.landing, self.warehouse, self.run_id_value)
        removed = lifecycle.prune(
            pipeline_database_url(self.pg_conn_id),
            layout,
            self.keep,
            database_url(self.pg_conn_id),
        )
        self.log.info(
            "retention: kept the newest %d run(s), pruned %d: %s",
            self.keep,
            len(removed),
            ", ".join(removed[:5]) + (" …" if len(removed) > 5 else ""),
        )
        return len(removed)
