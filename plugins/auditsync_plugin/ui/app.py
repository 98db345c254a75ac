"""The plugin's page inside the Airflow UI: recent reconciliation runs and the Data Docs.

Mounted by the API server under ``/auditsync`` (see the plugin's ``fastapi_apps``); every
route requires an Airflow login (``Depends(get_user)``: the UI's ``_token`` cookie or a bearer
token), because plugin apps get no authentication by default.

Where things are comes from Airflow itself: the ``auditsync_pg`` connection (the results
tables) and the ``auditsync_gx_root`` Variable (the Great Expectations project).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from . import runs

log = logging.getLogger(__name__)
PG_CONN_ID = "auditsync_pg"
GX_ROOT_VAR = "auditsync_gx_root"


def docs_dir(gx_root: Path) -> Path:
    return Path(gx_root) / "gx" / "uncommitted" / "data_docs" / "local_site"


def resolve_doc(root: Path, rel: str) -> Path | None:
    """The file ``rel`` names under ``root``, or None (missing, a folder, or outside root)."""
    root = root.resolve()
    target = (root / (rel or "index.html")).resolve()
    if target != root and root not in target.parents:
        return None
    return target if target.is_file() else None


def _airflow_conninfo() -> dict[str, Any]:
    from airflow.models.connection import Connection

    conn = Connection.get_connection_from_secrets(PG_CONN_ID)
    info = {
        "host": conn.host,
        "port": conn.port or 5432,
        "user": conn.login,
        "dbname": conn.schema or "postgres",
    }
    if conn.password:
        info["password"] = conn.password
    return info


def _airflow_gx_root() -> Path:
    from airflow.models.variable import Variable

    return Path(Variable.get(GX_ROOT_VAR))


def create_app(
    conninfo: Callable[[], dict[str, Any]] = _airflow_conninfo,
    gx_root: Callable[[], Path] = _airflow_gx_root,
    auth: Callable[..., Any] | None = None,
) -> FastAPI:
    """``auth``: the login dependency (default: Airflow's ``get_user``)."""
    if auth is None:
        from airflow.api_fastapi.core_api.security import get_user as auth
    from spark_jobs.common.statuses import DEFECTS, REPAIRABLE

    app = FastAPI(title="auditsync", dependencies=[Depends(auth)])

    def lines() -> tuple[list[runs.TopicLine], str | None]:
        try:
            return runs.pivot(runs.fetch(conninfo()), REPAIRABLE, DEFECTS), None
        except Exception as exc:  # the page still renders, saying why there is no table
            log.warning("auditsync page: cannot read runs: %s", exc)
            return [], f"cannot read reconciliation runs: {type(exc).__name__}: {exc}"

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        found, error = lines()
        has_docs = (docs_dir(gx_root()) / "index.html").is_file()
        return HTMLResponse(runs.render_page(found, has_docs, error))

    @app.get("/runs.json")
    def runs_json() -> JSONResponse:
        found, error = lines()
        return JSONResponse({"runs": [vars(line) for line in found], "error": error})

    @app.get("/docs/{path:path}")
    def data_docs(path: str) -> FileResponse:
        target = resolve_doc(docs_dir(gx_root()), path)
        if target is None:
            raise HTTPException(404, f"no Data Docs file {path!r}")
        return FileResponse(target)

    return app
