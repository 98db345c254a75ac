"""The ``apache_airflow_provider`` entry point: what ``airflow providers list`` shows and the
connection types the UI's connection form offers (the watch service; the pipeline's PostgreSQL,
which may differ from Airflow's own database).

Installed from the wheel, the DAG files ship as package data in ``auditsync_plugin/dags``
(``DAGS_FOLDER``): point Airflow's ``dags_folder`` (or a ``LocalDagBundle``) at it, nothing
copied. The UI stays a plugin, registered through the ``airflow.plugins`` entry point only:
the provider info names no plugin (Airflow would register it a second time from there, and
report the second as an import error).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

DAGS_FOLDER = Path(__file__).resolve().parent / "dags"


def _version() -> str:
    try:
        return version("auditsync")
    except PackageNotFoundError:  # a checkout run without installing
        return "0.0.0"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "auditsync",
        "name": "auditsync",
        "description": "Audit-log sync: the watch service's hook, sensors, triggers, operators "
        "and notifiers, the reconciliation DAGs and the Reconciliation page.",
        "versions": [_version()],
        # Assets named as the pipeline's OpenLineage events name the Iceberg tables
        # (auditsync_plugin.lineage), so the openlineage provider translates them too.
        "asset-uris": [
            {
                "schemes": ["iceberg"],
                "handler": "auditsync_plugin.lineage.sanitize_uri",
                "to_openlineage_converter": "auditsync_plugin.lineage.asset_to_openlineage",
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "auditsync_plugin.hooks.watch_service.WatchServiceHook",
                "connection-type": "auditsync_watch",
            },
            {
                "hook-class-name": "auditsync_plugin.hooks.pipeline_runs.PipelineRunsHook",
                "connection-type": "auditsync_pg",
            },
        ],
    }
