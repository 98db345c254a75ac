"""The pipeline's own state, apart from the source (issue 32): which tables it is, whether a
database holds any, and the one-time move of an install that kept it in the source's database.

The pipeline's state is the warehouse's Iceberg JDBC catalog, the run tables, the range
digests, the watch sessions' cursor marks, the index verify's scrub marks and the alert ledger:
what the pipeline verified and when. A restore or failover of the source must not take it back
in time, so production keeps it in a database of its own (``AUDITSYNC_PIPELINE_DATABASE_URL``).
Both databases carry every migration (the source's copies of these tables stay empty once
moved), so either can be pointed at the other without a schema step.

:func:`move` copies the tables from the source to the pipeline database in one transaction on
the target, then empties them in the source in one transaction: an interrupted move leaves the
source whole and the target empty (run it again), or, stopped between the two, the state in
both, where runs go on in the pipeline database and the source's copy is never read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from psycopg import sql

from watch_service.protocol.errors import AuditsyncError

# In the order a copy may insert them: reconcile_windows refers to reconcile_runs.
TABLES = (
    "pipeline_runs",
    "reconcile_runs",
    "reconcile_windows",
    "reconcile_summary",
    "reconcile_summary_pruned",
    "reconcile_digests",
    "session_marks",
    "index_scrubs",
    "alerts_sent",
    "iceberg.iceberg_tables",
    "iceberg.iceberg_namespace_properties",
)
# A run or a catalog table in a database means the pipeline has used it.
HELD = """SELECT (SELECT count(*) FROM pipeline_runs),
                 (SELECT count(*) FROM iceberg.iceberg_tables)"""
COMMAND = "auditsync pipeline move-state"


class PipelineStateError(AuditsyncError):
    pass


class Held(NamedTuple):
    runs: int
    tables: int

    @property
    def any(self) -> bool:
        return self.runs > 0 or self.tables > 0


def _name(table: str) -> sql.Composable:
    return sql.Identifier(*table.split("."))


def held(conn: Any) -> Held:
    """How many runs and catalog tables ``conn``'s database holds (any DB-API connection)."""
    cur = conn.cursor()
    cur.execute(HELD)
    runs, tables = cur.fetchone()
    return Held(int(runs), int(tables))


def refusal(source: Held, pipeline: Held) -> str | None:
    """Why a run must not start (pure): the pipeline database is empty while the source's holds
    the pipeline's state, so a run would start a second history beside the first."""
    if pipeline.any or not source.any:
        return None
    return (
        f"the pipeline database (AUDITSYNC_PIPELINE_DATABASE_URL) holds no pipeline state, but "
        f"the source's database holds {source.runs} run(s) and {source.tables} catalog "
        f"table(s): run `{COMMAND}` once to move them there"
    )


def check_apart(source_conn: Any, pipeline_conn: Any) -> None:
    """Raise :class:`PipelineStateError` when :func:`refusal` says so."""
    reason = refusal(held(source_conn), held(pipeline_conn))
    if reason:
        raise PipelineStateError(reason)


def move(source_conn: Any, pipeline_conn: Any, tables: Sequence[str] = TABLES) -> dict[str, int]:
    """Copy ``tables`` from the source's database to the pipeline's, then empty them in the
    source; returns the rows moved per table. Refuses a target that already holds state."""
    if held(pipeline_conn).any:
        raise PipelineStateError(
            "the pipeline database already holds pipeline state: nothing moved (the source's "
            "copy, if any, is left as it is)"
        )
    moved: dict[str, int] = {}
    with pipeline_conn.transaction():
        for table in tables:
            name = _name(table)
            with (
                source_conn.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(name)) as out,
                pipeline_conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(name)) as into,
            ):
                for data in out:
                    into.write(data)
            moved[table] = int(
                pipeline_conn.execute(sql.SQL("SELECT count(*) FROM {}").format(name)).fetchone()[0]
            )
    with source_conn.transaction():
        source_conn.execute(
            sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(_name(t) for t in tables))
        )
    return moved
