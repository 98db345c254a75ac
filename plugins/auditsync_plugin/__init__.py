"""The auditsync Airflow plugin: the watch-service hook, the sink-cursor sensor, the quality
and publish operators, and a page under Browse with recent reconciliation runs and the Great
Expectations Data Docs.

DAGs import the operators from their modules (``auditsync_plugin.sensors`` …); this class
registers the UI. Airflow loads plugins in every process (scheduler, workers, the DAG
processor), but only the API server serves the page, so the FastAPI app — and the auth
machinery it pulls in — is built on first access of ``fastapi_apps``, not at import.

The class lives in ``plugin.py`` and is exported lazily: importing this package must not import
Airflow, because Airflow reads ``provider.get_provider_info`` while its own configuration is
still loading (``airflow.plugins_manager`` imported then is a circular import).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AuditsyncPlugin"]


def __getattr__(name: str) -> Any:
    if name == "AuditsyncPlugin":
        from .plugin import AuditsyncPlugin

        return AuditsyncPlugin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
