"""One Spark step of the pipeline as one Airflow task, over Spark Connect when there is a server.

A cold ``spark-submit`` costs 12–15 s of JVM start per step on a small machine, most of an
interval's run. When the ``spark_connect_default`` connection exists (the Spark provider's
Spark Connect connection type: host, port, optional token), :class:`SparkStepOperator` calls
the step's in-process entry point ``spark_jobs.<step>.main.run(spark, argv)`` with a client
session of that long-running server; every step stays its own task with its own log. Without
the connection it is exactly Airflow's ``SparkSubmitOperator`` (the standalone-cluster path).
Either way it reports the datasets the step reads and writes to OpenLineage (``lineage``).

Either way the database URL travels in the environment (``AUDITSYNC_DATABASE_URL``), never in a
process's arguments, and the JDBC driver comes from ``spark_jobs.common.session`` (which honours
``AUDITSYNC_JDBC_JAR``). Importing this module imports neither pyspark nor the step modules.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from spark_jobs.common.cli import DATABASE_URL_ENV, PIPELINE_URL_ENV
from spark_jobs.warehouse.layout import JOBS, step_package

from .. import connect_session, lineage

CONNECT_CONN_ID = connect_session.CONN_ID
LOG_SIGNING_KEY_ENV = "AUDITSYNC_LOG_SIGNING_KEY"
OUTPUT_TAIL_LINES = 40


def connect_url(conn_id: str | None) -> str | None:
    """The ``sc://`` URL of connection ``conn_id``, or None when it is not defined."""
    if not conn_id:
        return None
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return SparkConnectHook(conn_id).get_connection_url()
    except AirflowNotFoundException:
        return None


def failure_message(step: str, remote: str, output: str, figures: Mapping[str, Any]) -> str:
    """What a failed gate says: its figures, then its output's tail (verify's verdict)."""
    tail = "\n".join(output.splitlines()[-OUTPUT_TAIL_LINES:])
    verdict = str(figures.get("verdict") or "")
    text = f"Spark step {step} did not pass (Spark Connect {remote}): {dict(figures)}"
    return "\n".join(x for x in (text, tail, verdict) if x)


class SparkStepOperator(SparkSubmitOperator):
    """``step``: one of ``spark_jobs.warehouse.layout.JOBS``; ``application_args``: its
    ``main.py`` flags; ``connect_conn_id``: the Spark Connect connection to prefer (None:
    always spark-submit); ``connect_session``: the run's Spark Connect session id to join and
    leave open (``connect_session``; '': a session of the task's own)."""

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "connect_session")
    ui_color = "#fde8d7"

    def __init__(
        self,
        *,
        step: str,
        connect_conn_id: str | None = CONNECT_CONN_ID,
        connect_session: str = "",
        **kwargs: Any,
    ) -> None:
        if step not in JOBS:
            raise ValueError(f"unknown Spark step {step!r}; expected one of {JOBS}")
        driver_error = None
        # The pinned jars, placed at execute time for the connection's master (see
        # ``session.submit_options``); a task given its own jars or packages keeps them.
        self._places_jars = "jars" not in kwargs and "packages" not in kwargs
        if self._places_jars:
            from spark_jobs.common.session import JdbcDriverMissing, submit_options

            try:
                options = submit_options()
                kwargs["jars"] = options["jars"]
                kwargs["conf"] = {**options["conf"], **(kwargs.get("conf") or {})}
            except (JdbcDriverMissing, ValueError) as exc:  # reported when a submit needs it
                driver_error = str(exc)
        super().__init__(**kwargs)
        self._driver_error = driver_error
        self.step = step
        self.connect_conn_id = connect_conn_id
        self.connect_session = connect_session

    def execute(self, context) -> Any:
        remote = connect_url(self.connect_conn_id)
        if remote is not None:
            return self.run_connected(
                importlib.import_module(f"{step_package(self.step)}.main"), remote
            )
        if self._driver_error:
            raise AirflowException(self._driver_error)
        if self._places_jars:
            self.place_jars()
        return super().execute(context)

    def place_jars(self) -> None:
        """Put the pinned jars where the master's executors load them from: on the driver's
        class path for a local master, from ``AUDITSYNC_SPARK_WORKER_JARS`` on the workers when
        set, else sent with the application."""
        from spark_jobs.common.session import JARS_PLACED_ENV, submit_options

        master = self._get_hook()._connection["master"]
        try:
            options = submit_options(master=master)
        except ValueError as exc:
            raise AirflowFailException(str(exc)) from None
        self.jars = options["jars"]
        self.driver_class_path = options["driver_class_path"]
        self.conf = {**options["conf"], **(self.conf or {})}  # the task's own settings win
        self.env_vars = {**(self.env_vars or {}), JARS_PLACED_ENV: "1"}
        self.log.info(
            "Spark master %s: jars %s",
            master,
            "sent with the application" if self.jars else "on the driver's and workers' paths",
        )

    def datasets(self) -> lineage.StepIO:
        """The datasets this step reads and writes, from its rendered arguments."""
        url = (self.env_vars or {}).get(DATABASE_URL_ENV)
        return lineage.step_io(self.step, [str(a) for a in self.application_args or []], url)

    def get_openlineage_facets_on_start(self) -> Any:
        """What the openlineage provider's listener reports when the task starts (its
        ``DefaultExtractor`` calls this, as for the provider's own operators)."""
        return lineage.operator_lineage(self.datasets())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self.get_openlineage_facets_on_start()

    def run_connected(self, module: Any, remote: str) -> dict[str, Any]:
        """The step in this process, as a client of the Spark Connect server at ``remote``:
        ``module.run(spark, args)`` with the flags a spark-submit would get."""
        from spark_jobs.common.session import build_session

        shared = bool(self.connect_session)
        remote = connect_session.session_url(remote, self.connect_session)
        argv = [str(a) for a in self.application_args or []]
        self.log.info("Spark Connect %s: %s %s", remote, self.step, " ".join(argv))
        # In this process the URL is parsed like any flag: it is no process's argument here.
        url = (self.env_vars or {}).get(DATABASE_URL_ENV)
        own = (self.env_vars or {}).get(PIPELINE_URL_ENV)
        args = module.build_parser().parse_args(
            [
                *argv,
                *(["--database-url", url] if url else []),
                *(["--pipeline-database-url", own] if own else []),
            ]
        )
        # verify's signing key, from the task's environment like the URL (not this process's)
        args.log_signing_key = (self.env_vars or {}).get(LOG_SIGNING_KEY_ENV) or None
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                spark = build_session(f"audit_sync.{self.task_id}", remote=remote)
                try:
                    figures = module.run(spark, args)
                finally:
                    if shared:
                        connect_session.leave_open(spark)
                    spark.stop()
        finally:  # what the step printed reaches the task log, whatever happened
            output = out.getvalue()
            for line in output.splitlines():
                self.log.info("%s", line)
        self.log.info("%s: %s", self.step, figures)
        if isinstance(figures, dict) and figures.get("passed") is False:
            # A gate's verdict is a finding: a retry would judge the same data the same way.
            raise AirflowFailException(failure_message(self.step, remote, output, figures))
        return figures
