"""A run's findings: each defect range reconcile found (consumer, topic, status, seq_from to
seq_to) and whether it was repaired, read with pyiceberg (no JVM). The query returns data;
``auditsync pipeline findings`` (``spark_jobs.findings_command``) and the Reconciliation page's
findings view and its CSV download (the Airflow plugin's ``ui/findings.py``) render it.

The ranges are the run's ``detail`` rows of a defect status. Repaired or not is verify's word:
a range the run's own verify left has a row in its ``remaining`` partition (``left`` seqs of
it still missing); a range with no such row was repaired. When a later verify re-checked the
run's repairable defects and saw them all repaired (``reconcile_runs.repairs_open`` false),
what the run's verify left of them is repaired too. A run whose verify did not run shows its
ranges ``unverified``. :func:`build` is pure, :func:`read` the I/O; they are filtered and paged
by ``spark_jobs.common.selection``, as every table of results is.
Anything that cannot be read is a ``FindingsError`` (an ``AuditsyncError``) whose message says
why in one line; the command prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from spark_jobs.common import selection
from spark_jobs.common.statuses import DEFECTS, REPAIRABLE
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.errors import AuditsyncError
from watch_service.storage import S3Config

COLUMNS = ("consumer", "topic", "status", "seq_from", "seq_to", "seqs", "left", "repaired")
REPAIRED, PARTLY, NOT_REPAIRED, UNVERIFIED = "yes", "partly", "no", "unverified"


class FindingsError(AuditsyncError):
    """A run's findings cannot be read as asked; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class Filters(selection.Filters):
    """What the findings are filtered by (``selection``: the one rule of filters and pages)."""

    consumer: str = ""
    topic: str = ""
    status: str = ""


@dataclasses.dataclass(frozen=True)
class Run:
    """What the run tables say of a run (``runs.run_findings``)."""

    warehouse: str | None
    verified: bool
    repairs_open: bool | None


def _key(row: Mapping[str, Any]) -> tuple:
    return (row["consumer"], row["topic"], row["seq"], row["seq_to"], row["status"])


def build(
    detail: Iterable[Mapping[str, Any]], remaining: Iterable[Mapping[str, Any]], run: Run
) -> list[dict[str, Any]]:
    """One row per defect range of the run's ``detail`` rows, ordered by consumer, topic,
    seq; ``remaining`` is the run's own verify's rows of this run (their ``left``)."""
    left_of = {_key(r): int(r["left"]) for r in remaining}
    rows = []
    for d in sorted((d for d in detail if d["status"] in DEFECTS), key=_key):
        seqs = int(d["seq_to"]) - int(d["seq"]) + 1
        left = left_of.get(_key(d), 0)
        if d["status"] in REPAIRABLE and run.repairs_open is False:
            left = 0  # a later verify saw every repairable defect of the run repaired
        if not run.verified:
            left, repaired = seqs, UNVERIFIED
        else:
            repaired = REPAIRED if left == 0 else NOT_REPAIRED if left == seqs else PARTLY
        rows.append(
            {
                "consumer": d["consumer"],
                "topic": d["topic"],
                "status": d["status"],
                "seq_from": int(d["seq"]),
                "seq_to": int(d["seq_to"]),
                "seqs": seqs,
                "left": left,
                "repaired": repaired,
            }
        )
    return rows


def run_of(found: tuple | None, run_id: str, catalog: str | None) -> Run:
    """``runs.run_findings``'s answer checked against the warehouse asked for (pure)."""
    if found is None:
        raise FindingsError(f"no pipeline run {run_id!r}")
    run = Run(*found)
    if run.warehouse is None:
        raise FindingsError(f"pipeline run {run_id!r} recorded no warehouse: it wrote nothing")
    if catalog is not None and run.warehouse != catalog:
        raise FindingsError(
            f"pipeline run {run_id!r} is of another warehouse ({run.warehouse}), not {catalog}"
        )
    return run


def read(database_url: str, run_id: str, work: str | None = None) -> list[dict[str, Any]]:
    """The run's findings, unfiltered; ``work`` the warehouse (default: the run's own, found
    by its id in the catalog)."""
    import psycopg
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import And, EqualTo, In

    from watch_service.store import runs

    layout = Layout("", work, "") if work else None
    with psycopg.connect(database_url, connect_timeout=5, autocommit=True) as conn:
        found = runs.run_findings(conn, run_id)
    run = run_of(found, run_id, layout.catalog if layout else None)
    assert run.warehouse is not None
    remote = layout is None or not layout.warehouse.is_local
    catalog = readers.catalog_named(
        run.warehouse, database_url, S3Config.from_env() if remote else None
    )
    equal: Any = EqualTo  # pydantic models: their generated signatures confuse mypy
    among: Any = In
    try:
        detail = readers.table_in(catalog, "detail")
        remaining = readers.table_in(catalog, "remaining")
    except (NoSuchTableError, NoSuchNamespaceError):
        raise FindingsError(f"warehouse {run.warehouse} has no detail table yet") from None
    defects = And(equal("run_id", run_id), among("status", DEFECTS))
    found_rows = readers.scan(detail, row_filter=defects).to_pylist()
    left = readers.scan(remaining, row_filter=equal("verify_run", run_id)).to_pylist()
    return build(found_rows, [r for r in left if r["run_id"] == run_id], run)
