"""The plugin class Airflow registers (see the package's docstring)."""

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
            from .ui.app import airflow_source_conninfo, create_app

            self._apps = [
                {
                    "app": create_app(source_conninfo=airflow_source_conninfo),
                    "url_prefix": URL_PREFIX,
                    "name": "auditsync reconciliation",
                }
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
