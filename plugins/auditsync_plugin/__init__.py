"""The auditsync Airflow plugin: the watch-service hook, the sink-cursor sensor, the quality
and publish operators, and a page under Browse with recent reconciliation runs and the Great
Expectations Data Docs.

DAGs import the operators from their modules (``auditsync_plugin.sensors`` …); this class
registers the UI. Airflow loads plugins in every process (scheduler, workers, the DAG
processor), but only the API server serves the page, so the FastAPI app — and the auth
machinery it pulls in — is built on first access of ``fastapi_apps``, not at import.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/auditsync"  # must not start with /api/v2, /ui, /execution or /auth


class _FastApiApps:
    """A descriptor building the plugin's app list once, when the API server asks."""

    def __init__(self) -> None:
        self._apps: list[dict[str, Any]] | None = None

    def __get__(self, instance: object, owner: type) -> list[dict[str, Any]]:
        if self._apps is None:
            from .ui.app import create_app

            self._apps = [
                {"app": create_app(), "url_prefix": URL_PREFIX, "name": "auditsync reconciliation"}
            ]
        return self._apps


class AuditsyncPlugin(AirflowPlugin):
    name = "auditsync"
    fastapi_apps = _FastApiApps()
    external_views = [  # noqa: RUF012 - Airflow's plugin API reads these class lists
        {
            "name": "Reconciliation",
            "href": "auditsync/",  # relative, trailing slash: served in an iframe
            "url_route": "auditsync",
            "destination": "nav",
            "category": "browse",
        }
    ]
