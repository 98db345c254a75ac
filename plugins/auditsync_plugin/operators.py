"""Operators of the audit_sync DAG that are not a plain ``spark-submit``.

* :class:`QualityCheckpointOperator` runs the Great Expectations checkpoints over the run's
  outputs (``quality.py``) and fails with a readable summary (``summary.py``): the failed
  expectations, how many rows broke them with examples, and the link to the Data Docs.
* :class:`StartRunOperator` resets the run's ``pipeline_runs`` row, so a re-run starts clean.
* :class:`PublishOperator` reads the passed run from ``pipeline_runs`` and attaches it to the
  run's asset events, so downstream DAGs scheduled on those assets see the run id and counts.

Heavy imports (pyspark, great_expectations) happen inside ``execute`` only.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

HOUR_MS = 3_600_000


def check_outputs(datasets: Mapping[str, str]) -> None:
    """Fail naming every dataset whose Parquet folder is missing."""
    missing = {name: path for name, path in datasets.items() if not Path(path).exists()}
    if missing:
        raise AirflowFailException("data quality: no output to validate for "
                                   + ", ".join(f"{n} ({p})" for n, p in missing.items()))


def default_docs_url() -> str:
    from airflow.sdk.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    return f"{base.rstrip('/')}/auditsync/docs/index.html"


class QualityCheckpointOperator(BaseOperator):
    """``datasets``: ``{name: parquet folder}`` with names from ``quality.suites``;
    ``docs_url``: where people open the Data Docs (default: the plugin's page under the
    API server's ``[api] base_url``)."""

    template_fields: Sequence[str] = ("gx_root", "datasets", "run_name", "docs_url")
    ui_color = "#fff4e0"

    def __init__(self, *, gx_root: str, datasets: Mapping[str, str], run_name: str,
                 docs_url: str | None = None, spark_master: str = "local[2]",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gx_root = gx_root
        self.datasets = dict(datasets)
        self.run_name = run_name
        self.docs_url = docs_url
        self.spark_master = spark_master

    def execute(self, context) -> dict[str, Any]:
        from pyspark.sql import SparkSession

        from spark_jobs.common import statuses as st

        from . import quality
        from .summary import summarize

        check_outputs(self.datasets)
        spark = (SparkSession.builder.master(self.spark_master).appName("audit_sync_quality")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        try:
            frames = {name: spark.read.parquet(path) for name, path in self.datasets.items()}
            # The outputs hold everything delivered so far, not just this interval: nothing
            # may be stamped later than now (plus an hour of clock skew).
            bounds = quality.Bounds(max_ts_ms=int(time.time() * 1000) + HOUR_MS)
            results = quality.run(
                Path(self.gx_root), frames, self.run_name, bounds, st.SUMMARY_STATUSES,
                st.DEFECTS, (st.ORIGIN_DELIVERED, st.ORIGIN_BACKFILL, st.ORIGIN_UNVERIFIED))
        finally:
            spark.stop()
        summary = summarize(results, self.docs_url or default_docs_url())
        self.log.info("%s", summary.text())
        if not summary.success:
            raise AirflowFailException(summary.text())
        return {"success": True, "evaluated": summary.evaluated, "docs_url": summary.docs_url,
                "docs_index": str(quality.docs_index(Path(self.gx_root)))}


def _database_url(conn_id: str) -> str:
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).get_uri()


class StartRunOperator(BaseOperator):
    """Mark the pipeline run ``running`` in ``pipeline_runs``, forgetting what an earlier
    attempt of the same run id recorded (so a re-run starts clean, like the runner does)."""

    template_fields: Sequence[str] = ("run_id_value",)

    def __init__(self, *, run_id_value: str, pg_conn_id: str = "auditsync_pg",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_id_value = run_id_value
        self.pg_conn_id = pg_conn_id

    def execute(self, context) -> str:
        from spark_jobs.common.results import start_run

        start_run(_database_url(self.pg_conn_id), self.run_id_value)
        return self.run_id_value


RUN_SQL = """SELECT status, defects_found, defects_remaining, steps
               FROM pipeline_runs WHERE run_id = %s"""


def published_extra(run_id: str, row: Sequence[Any] | None) -> dict[str, Any]:
    """The JSON-safe run result riding on the asset events; refuses a run that did not pass."""
    if row is None:
        raise AirflowFailException(f"publish: pipeline run {run_id} is not in pipeline_runs")
    status, found, remaining, steps = row
    if status != "passed":
        raise AirflowFailException(f"publish: pipeline run {run_id} is {status!r}, not passed")
    counts = {step: {k: v for k, v in figures.items() if k != "seconds"}
              for step, figures in sorted((steps or {}).items())}
    return {"run_id": run_id, "status": status, "defects_found": found,
            "defects_remaining": remaining, "counts": counts}


class PublishOperator(BaseOperator):
    """Attach the passed run's result to the asset events of ``outlets``."""

    template_fields: Sequence[str] = ("run_id_value",)

    def __init__(self, *, run_id_value: str, pg_conn_id: str = "auditsync_pg",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_id_value = run_id_value
        self.pg_conn_id = pg_conn_id

    def execute(self, context) -> dict[str, Any]:
        import psycopg

        with psycopg.connect(_database_url(self.pg_conn_id), connect_timeout=10) as conn:
            row = conn.execute(RUN_SQL, (self.run_id_value,)).fetchone()
        extra = published_extra(self.run_id_value, row)
        for asset in self.outlets:
            context["outlet_events"][asset].extra = extra
        self.log.info("published %s", json.dumps(extra, sort_keys=True))
        return extra
