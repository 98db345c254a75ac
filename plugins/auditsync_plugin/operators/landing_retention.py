"""The maintenance DAG's landing retention task: the segments a passed run verified and older
than ``AUDITSYNC_LANDING_RETENTION_HOURS`` deleted (``spark_jobs.steps.maintenance.landing``, no
Spark), through the landing's storage as the plugin reaches it (``landing_store``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

PG_CONN_ID = "auditsync_pg"


class LandingRetentionOperator(BaseOperator):
    """Delete expired landing segments; the figures are the task's result."""

    template_fields: Sequence[str] = ("landing", "warehouse", "retention_hours")

    def __init__(
        self,
        *,
        landing: str,
        warehouse: str,
        retention_hours: str,
        pg_conn_id: str = PG_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.landing = landing
        self.warehouse = warehouse
        self.retention_hours = retention_hours
        self.pg_conn_id = pg_conn_id

    def execute(self, context) -> dict[str, Any]:
        from spark_jobs.steps.maintenance import landing, landing_plan
        from watch_service.storage import StorageError

        from ..hooks.landing_store import landing_storage
        from ..hooks.pipeline_runs import pipeline_database_url

        try:
            hours = landing_plan.retention_hours(self.retention_hours)
            store = landing_storage(self.landing)
        except (landing_plan.RetentionSettingError, StorageError) as exc:
            raise AirflowFailException(str(exc)) from None
        figures = landing.run(store, self.warehouse, pipeline_database_url(self.pg_conn_id), hours)
        self.log.info("landing retention: %s", figures)
        return figures
