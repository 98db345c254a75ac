"""Operators of the audit_sync DAG that are not a plain ``spark-submit``.

* :class:`QualityCheckpointOperator` runs the Great Expectations checkpoints over one run's
  slice of the outputs (``quality.py``) — its deliveries, its reconcile detail and summary, the
  audit-log partitions it wrote, as ``spark_jobs.common.slices.quality_frames`` selects them —
  and fails with a readable summary (``quality_summary.py``): the failed expectations, how many rows
  broke them with examples, and the link to the Data Docs. The whole history is re-verified
  on demand by the ``audit_full`` DAG, not here.
* :class:`StartRunOperator` resets the run's ``pipeline_runs`` row, so a re-run starts clean
  (and refuses a past run that later runs built on).
* :class:`PublishOperator` reads the passed run from ``pipeline_runs`` and attaches it to the
  run's asset events, so downstream DAGs scheduled on those assets see the run id and counts.

The run tables are reached through
:class:`~auditsync_plugin.hooks.pipeline_runs.PipelineRunsHook`, the Spark session through the
jobs' one builder (``spark_jobs.common.session``): over Spark Connect when the
``spark_connect_default`` connection exists, else a local JVM. Heavy imports
(pyspark, great_expectations) happen inside ``execute`` only.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from .. import connect_session as sessions
from .spark_step import CONNECT_CONN_ID, connect_url

HOUR_MS = 3_600_000
# A dataset of at most this many rows is validated in this process, as a pandas DataFrame (one
# Spark job to fetch it); a larger one on Spark, where it lies. GX asks about 40 metric queries
# of each dataset: on Spark Connect each is a planned and executed query (the quality step took
# 32 s a run), in pandas a few milliseconds over rows already here.
LOCAL_ROWS = 50_000
PG_CONN_ID = "auditsync_pg"
# Importing Great Expectations costs seconds of CPU (4-12 s of a quality task on this two-core
# machine, the largest part of an empty run's): it loads in a thread while the slice is fetched,
# which waits on Spark.
QUALITY_MODULE = "auditsync_plugin.quality"


def check_outputs(datasets: Mapping[str, str]) -> None:
    """Fail naming every dataset whose Parquet folder is missing."""
    missing = {name: path for name, path in datasets.items() if not Path(path).exists()}
    if missing:
        raise AirflowFailException(
            "data quality: no output to validate for "
            + ", ".join(f"{n} ({p})" for n, p in missing.items())
        )


def has_data(path: str) -> bool:
    """Whether a Parquet folder holds any data file (an empty interval writes none)."""
    return any(Path(path).rglob("*.parquet"))


def read_dataset(spark, name: str, path: str):
    """A dataset as written; its schema from ``spark_jobs.warehouse.schemas`` when it is empty,
    where Parquet has nothing to infer one from."""
    from spark_jobs.common import local_rows
    from spark_jobs.warehouse import schemas

    if has_data(path):
        return spark.read.parquet(path)
    known = {
        "deliveries": schemas.DELIVERIES,
        "reconciliation": schemas.SUMMARY,
        "remaining": schemas.DETAIL,
        "audit_log": schemas.AUDIT_LOG,
    }
    return local_rows.empty(spark, known[name])


def held(df, local_rows: int = LOCAL_ROWS):
    """``df`` where GX validates it fastest: as a pandas DataFrame when it has at most
    ``local_rows`` rows (integer columns stay integers, nulls and all), else computed once and
    held by Spark (memory, then disk) for GX's metric queries, each of which would otherwise plan
    the Iceberg scan again."""
    import pandas as pd  # type: ignore[import-untyped]
    import pyarrow as pa

    head = df.limit(local_rows + 1).toArrow()
    if head.num_rows > local_rows:
        return df.localCheckpoint()
    ints = {t: pd.Int64Dtype() for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())}
    return head.to_pandas(types_mapper=ints.get)


def held_all(frames: Mapping[str, Any], local_rows: int = LOCAL_ROWS) -> dict[str, Any]:
    """``held`` of every frame, fetched side by side: each is one Spark job (one round trip to a
    Spark Connect server) that mostly waits."""
    with ThreadPoolExecutor(max_workers=max(1, len(frames)), thread_name_prefix="held") as pool:
        futures = {name: pool.submit(held, df, local_rows) for name, df in frames.items()}
        return {name: future.result() for name, future in futures.items()}


def load_in_background(module: str) -> threading.Thread:
    """Start importing ``module`` in a thread; a later ``import`` of it waits for that one (the
    import lock) and raises what it raised."""
    thread = threading.Thread(
        target=importlib.import_module, args=(module,), name=f"import {module}", daemon=True
    )
    thread.start()
    return thread


def default_docs_url() -> str:
    from airflow.sdk.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    return f"{base.rstrip('/')}/auditsync/docs/index.html"


def run_slice(
    spark, landing: str, warehouse: str, run_id: str, database_url: str
) -> dict[str, Any]:
    """The run's datasets, by suite name, as the warehouse layout selects them."""
    from spark_jobs.common.slices import quality_frames
    from spark_jobs.warehouse.layout import Layout

    return quality_frames(spark, Layout(landing, warehouse, run_id), database_url)


class QualityCheckpointOperator(BaseOperator):
    """``run``: ``{"landing", "warehouse", "run_id"}`` of the pipeline run to validate, or
    ``datasets``: ``{name: parquet folder}`` with names from ``quality.suites``; ``docs_url``:
    where people open the Data Docs (default: the plugin's page under the API server's
    ``[api] base_url``); ``connect_session``: the run's Spark Connect session to join and leave
    open (``connect_session``; '': a session of its own)."""

    template_fields: Sequence[str] = (
        "gx_root",
        "datasets",
        "run",
        "run_name",
        "docs_url",
        "connect_session",
    )
    ui_color = "#fff4e0"

    def __init__(
        self,
        *,
        gx_root: str,
        run_name: str,
        datasets: Mapping[str, str] | None = None,
        run: Mapping[str, str] | None = None,
        docs_url: str | None = None,
        spark_master: str = "local[2]",
        connect_conn_id: str | None = CONNECT_CONN_ID,
        pg_conn_id: str = PG_CONN_ID,
        connect_session: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pg_conn_id = pg_conn_id
        self.connect_session = connect_session
        if (datasets is None) == (run is None):
            raise ValueError("QualityCheckpointOperator: give either datasets or run")
        self.gx_root = gx_root
        self.datasets = dict(datasets or {})
        self.run = dict(run or {})
        self.run_name = run_name
        self.docs_url = docs_url
        self.spark_master = spark_master
        self.connect_conn_id = connect_conn_id

    def execute(self, context) -> dict[str, Any]:
        from spark_jobs.common import statuses as st
        from spark_jobs.common.session import job_session

        from ..hooks.pipeline_runs import pipeline_database_url
        from ..quality_summary import summarize

        load_in_background(QUALITY_MODULE)
        if self.datasets:
            check_outputs(self.datasets)
        remote = connect_url(self.connect_conn_id)
        if remote is not None:
            remote = sessions.session_url(remote, self.connect_session)
        self.log.info("Spark: %s", remote or self.spark_master)
        spark_conf = {"spark.ui.enabled": "false"}
        with job_session(
            "audit_sync_quality", master=self.spark_master, remote=remote, conf=spark_conf
        ) as spark:
            if remote is not None and self.connect_session:
                sessions.leave_open(spark)
            if self.run:
                frames = run_slice(
                    spark,
                    self.run["landing"],
                    self.run["warehouse"],
                    self.run["run_id"],
                    pipeline_database_url(self.pg_conn_id),
                )
            else:
                frames = {
                    name: read_dataset(spark, name, path) for name, path in self.datasets.items()
                }
            frames = held_all(frames)
            from .. import quality

            # Nothing may be stamped later than now (plus an hour of clock skew).
            bounds = quality.Bounds(max_ts_ms=int(time.time() * 1000) + HOUR_MS)
            results = quality.run(
                self.gx_root,
                frames,
                self.run_name,
                bounds,
                st.SUMMARY_STATUSES,
                st.DEFECTS,
                (st.ORIGIN_DELIVERED, st.ORIGIN_BACKFILL, st.ORIGIN_UNVERIFIED),
            )
        summary = summarize(results, self.docs_url or default_docs_url())
        self.log.info("%s", summary.text())
        if not summary.success:
            raise AirflowFailException(summary.text())
        return {
            "success": True,
            "evaluated": summary.evaluated,
            "docs_url": summary.docs_url,
            "docs_index": quality.docs_index(self.gx_root),
        }


class StartRunOperator(BaseOperator):
    """Mark the pipeline run ``running`` in ``pipeline_runs``, forgetting what an earlier
    attempt of the same run id recorded (so a re-run starts clean, like the runner does).
    A run of ``warehouse`` that later runs built on (an operator's backfill of a past
    interval, a cleared old run) is refused first, its record left as it was. Hands the
    attempt a new Spark Connect session id (XCom ``connect_session.XCOM_KEY``)."""

    template_fields: Sequence[str] = ("run_id_value", "warehouse")

    def __init__(
        self,
        *,
        run_id_value: str,
        warehouse: str = "",
        pg_conn_id: str = PG_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.run_id_value = run_id_value
        self.warehouse = warehouse
        self.pg_conn_id = pg_conn_id

    def execute(self, context) -> str:
        from spark_jobs.warehouse.layout import Layout
        from watch_service.protocol.errors import AuditsyncError
        from watch_service.store import runs

        from ..hooks.pipeline_runs import PipelineRunsHook

        hook = PipelineRunsHook(self.pg_conn_id)
        try:
            hook.check_apart()
        except AuditsyncError as exc:
            raise AirflowFailException(str(exc)) from None
        catalog = Layout("", self.warehouse, "").catalog if self.warehouse else None
        if catalog:
            later = hook.later_runs(catalog, self.run_id_value)
            if later:
                raise AirflowFailException(runs.rerun_refusal(self.run_id_value, later))
        hook.start_run(self.run_id_value, catalog)
        ti = context.get("ti")
        if ti is not None:
            ti.xcom_push(key=sessions.XCOM_KEY, value=sessions.new_id())
        return self.run_id_value


def published_extra(run_id: str, row: Sequence[Any] | None) -> dict[str, Any]:
    """The JSON-safe run result riding on the asset events; refuses a run that did not pass."""
    if row is None:
        raise AirflowFailException(f"publish: pipeline run {run_id} is not in pipeline_runs")
    status, found, remaining, steps = row
    if status != "passed":
        raise AirflowFailException(f"publish: pipeline run {run_id} is {status!r}, not passed")
    counts = {
        step: {k: v for k, v in figures.items() if k != "seconds"}
        for step, figures in sorted((steps or {}).items())
    }
    return {
        "run_id": run_id,
        "status": status,
        "defects_found": found,
        "defects_remaining": remaining,
        "counts": counts,
    }


class PublishOperator(BaseOperator):
    """Attach the passed run's result to the asset events of ``outlets``. An ``AssetAlias``
    among them gets one event per dataset the run wrote (``lineage.published``: the Iceberg
    tables of ``warehouse`` and the search index), under the names OpenLineage reports."""

    template_fields: Sequence[str] = ("run_id_value", "warehouse")

    def __init__(
        self,
        *,
        run_id_value: str,
        warehouse: str = "",
        pg_conn_id: str = PG_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.run_id_value = run_id_value
        self.warehouse = warehouse
        self.pg_conn_id = pg_conn_id

    def execute(self, context) -> dict[str, Any]:
        from airflow.sdk import Asset, AssetAlias

        from .. import lineage
        from ..hooks.pipeline_runs import PipelineRunsHook

        hook = PipelineRunsHook(self.pg_conn_id)
        extra = published_extra(self.run_id_value, hook.run_row(self.run_id_value))
        for asset in self.outlets:
            if not isinstance(asset, AssetAlias):
                context["outlet_events"][asset].extra = extra
                continue
            for dataset in lineage.published(self.warehouse, hook.get_uri()):
                context["outlet_events"][asset].add(
                    Asset(uri=dataset.uri, group="auditsync"), extra=extra
                )
        self.log.info("published %s", json.dumps(extra, sort_keys=True))
        return extra
