"""The DAG bundle of the DAG files this package ships (``auditsync_plugin/dags``).

Installed from the wheel, one setting points Airflow at them, wherever pip put the package
(the official image's site-packages, a virtualenv, a managed service's):

    AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST='[{"name": "auditsync",
      "classpath": "auditsync_plugin.bundle.AuditsyncDagBundle", "kwargs": {}}]'

Add the entry to a list that already names your own bundles; nothing is copied.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.dag_processing.bundles.local import LocalDagBundle

from .provider import DAGS_FOLDER

BUNDLE_NAME = "auditsync"


class AuditsyncDagBundle(LocalDagBundle):
    """A local bundle whose path defaults to the installed package's DAG files."""

    def __init__(self, *, path: str | None = None, **kwargs: Any) -> None:
        super().__init__(path=path or str(DAGS_FOLDER), **kwargs)


def bundle_config(name: str = BUNDLE_NAME) -> str:
    """The ``dag_bundle_config_list`` entry (as the JSON list Airflow reads) naming this bundle."""
    classpath = f"{AuditsyncDagBundle.__module__}.{AuditsyncDagBundle.__qualname__}"
    return json.dumps([{"name": name, "classpath": classpath, "kwargs": {}}])
