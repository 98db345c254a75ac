"""The auditsync Airflow provider: in the provider layout, ``hooks/`` (the watch service, the
pipeline's run tables, the landing zone's storage), ``operators/`` (the Spark steps, the run's
start, quality checkpoint, publish and finish, landing retention), ``sensors/`` and
``triggers/`` (the sinks' cursors), ``notifications/`` (the alerts); the pure rules they share
beside them (``sink_cursors``, ``retries``, ``deadlines``, ``step_args``, ``quality``); the DAG
files as package data (``dags/``, :mod:`.bundle`); and a page under Browse with recent
reconciliation runs and the Great Expectations Data Docs (``ui/``, registered by
:mod:`.plugin`).

DAGs import the operators from their modules; the plugin class registers the UI. Airflow loads
plugins in every process (scheduler, workers, the DAG processor), but only the API server
serves the page, so the FastAPI app — and the auth machinery it pulls in — is built on first
access of ``fastapi_apps``, not at import.

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
