"""The plugin's page inside the Airflow UI: recent reconciliation runs and the Data Docs.

Mounted by the API server under ``/auditsync`` (see the plugin's ``fastapi_apps``); every
route requires an Airflow login (``Depends(get_user)``: the UI's ``_token`` cookie or a bearer
token), because plugin apps get no authentication by default.

Where things are comes from Airflow itself: the ``auditsync_pg`` connection (the results
tables), the ``auditsync_gx_root`` Variable (where the Great Expectations results and Data Docs
are: a path, ``file://…`` or ``s3://…``, read through ``docs_site``, so this page needs no disk
shared with the worker that validated) and the
``auditsync_landing`` Variable (the sinks' cursors, for the lag table: a path, ``file://…`` or
``s3://…``, reached as ``landing_store`` says) and the ``auditsync_warehouse`` Variable (the
Iceberg warehouse, for the audit-log page: the audit log as a run left it, ``audit_log.py``,
each row linked to its C2SP tlog-proof (``proof``, the checkpoint opened with the connection
``auditsync_log_key``'s key); and for a run's findings, ``findings.py``: its defect ranges, as
a page and as CSV).
``static/`` holds the page's style sheet and ``static/vendor/`` the Data Docs' assets
(``assets.py`` fetches them); Data Docs pages are rewritten as they are served to load those
instead of public CDNs.
"""

from __future__ import annotations

import importlib.util
import logging
import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
)

from watch_service.protocol.errors import AuditsyncError
from watch_service.storage import Storage

from .. import docs_site
from ..hooks.landing_store import landing_storage
from ..sink_cursors import read_positions
from . import assets, audit_log, findings, report, runs, signatures
from .page import render_page

log = logging.getLogger(__name__)
PG_CONN_ID = "auditsync_pg"
GX_ROOT_VAR = "auditsync_gx_root"
LANDING_VAR = "auditsync_landing"
WAREHOUSE_VAR = "auditsync_warehouse"
LOG_KEY_CONN_ID = "auditsync_log_key"
STATIC_DIR = Path(__file__).resolve().parent / "static"


class WarehouseUnset(AuditsyncError):
    """The audit-log page has no warehouse to read."""


def doc_name(rel: str) -> str | None:
    """The Data Docs file ``rel`` names, relative to the site (``index.html`` for nothing), or
    None when it would leave the site (``..``, an absolute path, an empty part)."""
    if not rel:
        return docs_site.INDEX
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return rel


def resolve_doc(root: Path, rel: str) -> Path | None:
    """The file ``rel`` names under ``root``, or None (missing, a folder, or outside root)."""
    root = root.resolve()
    target = (root / (rel or "index.html")).resolve()
    if target != root and root not in target.parents:
        return None
    return target if target.is_file() else None


def gx_images_dir() -> Path:
    """The images GX ships (its navbar logo among them), served as ``static/vendor/gx/``."""
    spec = importlib.util.find_spec("great_expectations")  # found, not imported: it is slow
    assert spec is not None and spec.origin is not None, "great_expectations is not installed"
    return Path(spec.origin).parent / "render" / "view" / "static" / "images"


def vendor_base(doc_path: str) -> str:
    """The vendor folder's URL relative to the Data Docs page ``doc_path`` (under docs/)."""
    return "../" * (doc_path.count("/") + 1) + "static/vendor/"


def static_file(static: Path, rel: str) -> Path | None:
    """The plugin's static file ``rel``: GX's images under ``vendor/gx/``, else ``static``."""
    gx = "vendor/" + assets.GX_IMAGES_PREFIX
    if rel.startswith(gx):
        return resolve_doc(gx_images_dir(), rel[len(gx) :])
    return resolve_doc(static, rel) if rel else None


def sink_cursors(landing: Storage | None) -> dict[tuple[str, str], int]:
    """(consumer, topic) -> the sink's persisted cursor, from the landing zone's state files."""
    if landing is None:
        return {}
    positions, _ = read_positions(landing)
    return {(p.consumer, t): c for p in positions for t, c in p.cursors.items()}


def _airflow_conninfo() -> dict[str, Any]:
    """The pipeline's database: the connection ``auditsync_pipeline``, else ``auditsync_pg``."""
    from ..hooks.pipeline_runs import pipeline_conn_id

    return _conninfo_of(pipeline_conn_id(PG_CONN_ID))


def airflow_source_conninfo() -> dict[str, Any]:
    return _conninfo_of(PG_CONN_ID)


def _conninfo_of(conn_id: str) -> dict[str, Any]:
    from airflow.models.connection import Connection

    conn = Connection.get_connection_from_secrets(conn_id)
    info = {
        "host": conn.host,
        "port": conn.port or 5432,
        "user": conn.login,
        "dbname": conn.schema or "postgres",
    }
    if conn.password:
        info["password"] = conn.password
    return info


def _airflow_gx_root() -> str:
    from airflow.models.variable import Variable

    return str(Variable.get(GX_ROOT_VAR))


def _airflow_landing() -> Storage | None:
    from airflow.models.variable import Variable

    value = Variable.get(LANDING_VAR, default_var=None)
    return None if not value else landing_storage(value)


def _airflow_log_key() -> str | None:
    """The key the proofs' checkpoints are opened with: the connection ``auditsync_log_key``'s
    password (the signing key verify signs with, or a verifier key), if it exists."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(LOG_KEY_CONN_ID).password or None
    except AirflowNotFoundException:
        return None


def _airflow_warehouse() -> str | None:
    from airflow.models.variable import Variable

    return Variable.get(WAREHOUSE_VAR, default_var=None) or None


def create_app(
    conninfo: Callable[[], dict[str, Any]] = _airflow_conninfo,
    gx_root: Callable[[], str] = _airflow_gx_root,
    auth: Callable[..., Any] | None = None,
    landing: Callable[[], Storage | None] = _airflow_landing,
    static: Path = STATIC_DIR,
    warehouse: Callable[[], str | None] = _airflow_warehouse,
    log_key: Callable[[], str | None] = _airflow_log_key,
    source_conninfo: Callable[[], dict[str, Any]] | None = None,
) -> FastAPI:
    """``auth``: the login dependency (default: Airflow's ``get_user``); ``conninfo`` reaches
    the pipeline's database, ``source_conninfo`` the source's (the topics' heads; None: the
    same as ``conninfo``)."""
    if auth is None:
        from airflow.api_fastapi.core_api.security import get_user as auth
    from spark_jobs.common import selection
    from spark_jobs.common.statuses import DEFECTS, REPAIRABLE
    from spark_jobs.findings import Filters

    app = FastAPI(title="auditsync", dependencies=[Depends(auth)])
    absent = assets.missing(static / "vendor")
    if absent:
        log.warning(
            "auditsync page: Data Docs assets missing (%s): run `python %s`",
            ", ".join(absent),
            assets.__file__,
        )

    def read() -> tuple[list[runs.TopicLine], list[report.Lag], str | None]:
        try:
            rows, progress = runs.fetch(
                conninfo(), source=None if source_conninfo is None else source_conninfo()
            )
        except Exception as exc:  # the page still renders, saying why there is no table
            log.warning("auditsync page: cannot read runs: %s", exc)
            return [], [], f"cannot read reconciliation runs: {type(exc).__name__}: {exc}"
        try:
            cursors = sink_cursors(landing())
        except Exception as exc:  # no sink figures is no reason to hide the rest
            log.warning("auditsync page: cannot read the sinks' cursors: %s", exc)
            cursors = {}
        lines = runs.pivot(rows, REPAIRABLE, DEFECTS)
        try:
            verifier = audit_log.verifier_of(log_key())
        except audit_log.NoLogKey as exc:  # the checkpoints say "not checked"
            log.info("auditsync page: checkpoints not checked: %s", exc)
            verifier = None
        except Exception as exc:  # the connection cannot be read: not checked, not hidden
            log.warning("auditsync page: cannot read the log key: %s", exc)
            verifier = None
        signatures.check(lines, verifier)
        return lines, report.lags(progress, cursors), None

    @app.get("/", response_class=HTMLResponse)
    def index(
        topic: str | None = None, consumer: str | None = None, page: str | None = None
    ) -> HTMLResponse:
        found, lags, error = read()
        try:
            has_docs = docs_site.site_storage(gx_root()).exists(docs_site.INDEX)
        except Exception as exc:  # an unreachable store hides the link, not the page
            log.warning("auditsync page: cannot look for the Data Docs: %s", exc)
            has_docs = False
        filters = report.Filters.parse(topic, consumer, page)
        return HTMLResponse(render_page(found, has_docs, error, filters, lags))

    @app.get("/runs.json")
    def runs_json() -> JSONResponse:
        found, lags, error = read()
        return JSONResponse(
            {
                "runs": [vars(line) for line in found],
                "lags": [
                    {**vars(lag), "sink_behind": lag.sink_behind, "unreconciled": lag.unreconciled}
                    for lag in lags
                ],
                "error": error,
            }
        )

    @app.get("/audit-log", response_class=HTMLResponse)
    def audit_log_page(run: str = "", topic: str = "", after: int = 0) -> HTMLResponse:
        try:
            where = warehouse()
            if not where:
                raise WarehouseUnset(f"the Airflow Variable {WAREHOUSE_VAR} is not set")
            view = audit_log.read(conninfo(), where, run.strip(), topic.strip(), max(0, after))
        except AuditsyncError as exc:  # an unknown run, another warehouse's, an expired one
            failed = audit_log.View(run, topic, after, error=str(exc))
            return HTMLResponse(audit_log.render(failed), 404)
        except Exception as exc:  # the database or the object store: say so, in the page
            log.warning("auditsync audit-log page: %s", exc)
            failed = audit_log.View(run, topic, after, error=f"{type(exc).__name__}: {exc}")
            return HTMLResponse(audit_log.render(failed), 503)
        return HTMLResponse(audit_log.render(view))

    @app.get("/proof", response_class=PlainTextResponse)
    def proof(topic: str, seq: int, run: str = "") -> PlainTextResponse:
        """The C2SP tlog-proof of one audit-log row: in the signed log of ``run`` (default:
        the latest), its checkpoint opened with the connection ``auditsync_log_key``'s key."""
        try:
            where = warehouse()
            if not where:
                raise WarehouseUnset(f"the Airflow Variable {WAREHOUSE_VAR} is not set")
            text = audit_log.proof(where, log_key(), topic.strip(), seq, run.strip() or None)
        except audit_log.NoLogKey as exc:
            return PlainTextResponse(f"{exc}\n", 503)
        except AuditsyncError as exc:  # not signed (yet), not in the log, no such run
            return PlainTextResponse(f"{exc}\n", 404)
        except Exception as exc:  # the object store: say so
            log.warning("auditsync proof: %s", exc)
            return PlainTextResponse(f"{type(exc).__name__}: {exc}\n", 503)
        return PlainTextResponse(text)

    def run_findings(run: str) -> list[dict[str, Any]]:
        from spark_jobs.findings import FindingsError
        from spark_jobs.findings import read as read_findings

        if not run.strip():
            raise FindingsError("no run given: open a run's findings from its line of the runs")
        return read_findings(audit_log.database_url(conninfo()), run.strip(), warehouse())

    @app.get("/findings", response_class=HTMLResponse)
    def findings_page(
        run: str = "",
        consumer: str = "",
        topic: str = "",
        status: str = "",
        page: str = "1",
        rows: str = "",
    ) -> HTMLResponse:
        chosen = Filters.from_query(consumer=consumer, topic=topic, status=status)
        try:
            found = run_findings(run)
        except AuditsyncError as exc:  # an unknown run, another warehouse's
            return HTMLResponse(findings.render(findings.View(run, chosen, error=str(exc))), 404)
        except Exception as exc:  # the database or the object store: say so, in the page
            log.warning("auditsync findings page: %s", exc)
            failed = findings.View(run, chosen, error=f"{type(exc).__name__}: {exc}")
            return HTMLResponse(findings.render(failed), 503)
        number, size = selection.page_number(page), selection.page_size(rows)
        return HTMLResponse(findings.render(findings.view(run, found, chosen, number, size)))

    @app.get("/findings.csv")
    def findings_csv(
        run: str = "", consumer: str = "", topic: str = "", status: str = ""
    ) -> Response:
        chosen = Filters.from_query(consumer=consumer, topic=topic, status=status)
        try:
            found = run_findings(run)
        except AuditsyncError as exc:
            raise HTTPException(404, str(exc)) from None
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in run)
        return Response(
            findings.render_csv(selection.select(found, chosen)),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="findings-{name}.csv"'},
        )

    @app.get("/docs/{path:path}", response_model=None)
    def data_docs(path: str) -> Response:
        name = doc_name(path)
        site = docs_site.site_storage(gx_root())
        try:
            data = None if name is None else site.read_bytes(name)
        except OSError:
            if not site.is_folder(name or ""):
                raise
            data = None
        if data is None:
            raise HTTPException(404, f"no Data Docs file {path!r}")
        if (name or "").endswith(".html"):
            page = data.decode("utf-8")
            return HTMLResponse(assets.rewrite(page, vendor_base(path or docs_site.INDEX)))
        kind = mimetypes.guess_type(name or "")[0] or "application/octet-stream"
        return Response(data, media_type=kind)

    @app.get("/static/{path:path}")
    def static_files(path: str) -> FileResponse:
        target = static_file(static, path)
        if target is None:
            raise HTTPException(404, f"no static file {path!r}")
        return FileResponse(target)

    return app
