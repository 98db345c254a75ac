"""Where the Great Expectations results live under the ``auditsync_gx_root`` location (a path,
``file://…`` or ``s3://bucket/prefix``): the validation results and the Data Docs site, the
two things that outlive a checkpoint run. The quality task writes both through
``gx_store.StorageStoreBackend``; the plugin's page serves the site from the same location.
This module imports neither GX nor Airflow, so the API server's page stays light.
"""

from __future__ import annotations

from watch_service.storage import Storage

from .hooks.landing_store import landing_storage

SITE_NAME = "local_site"
VALIDATIONS = "gx/uncommitted/validations"
SITE = f"gx/uncommitted/data_docs/{SITE_NAME}"
INDEX = "index.html"


def site_storage(gx_root: str) -> Storage:
    """The Data Docs site under ``gx_root``; credentials as the landing zone's."""
    return landing_storage(gx_root).child(SITE)
