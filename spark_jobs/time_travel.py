"""The audit log as a pipeline run left it, or as it was at a given time: Iceberg time travel
from Python (pyiceberg through ``spark_jobs.warehouse.readers``, no JVM). The queries return
data (:func:`page`, :class:`Page`); ``auditsync audit-log show``
(``spark_jobs.audit_log_command``) and the Airflow plugin's audit-log page render it.
``--as-of RUN_ID`` reads the snapshot the run recorded
(``pipeline_runs.snapshots['audit_log']``; a run that did not write the audit log left it as it
was when the run finished); ``--as-of 2026-11-26T08:00:00Z`` the snapshot
current then; no ``--as-of``, the table now. Rows come in seq order, one topic, a page at a
time (``--after`` the last seq seen). Anything that cannot be read is a ``TimeTravelError``
(or the storage module's ``StorageError``: an ``AuditsyncError``) whose message says why in one
line; the command prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import TYPE_CHECKING, Any

from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import LEGACY_PROPERTY, Layout
from watch_service.protocol.errors import AuditsyncError

if TYPE_CHECKING:
    from pyiceberg.table import Table

TABLE = "audit_log"
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}")


class TimeTravelError(AuditsyncError):
    """The audit log cannot be read as asked; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class AsOf:
    """What ``--as-of`` asks for: a run, a time, or (neither) now."""

    run_id: str | None = None
    when: dt.datetime | None = None

    @classmethod
    def parse(cls, text: str | None) -> AsOf:
        """A value starting like a date (``2026-11-26``) is a timestamp, anything else a run
        id; a timestamp without a zone is UTC."""
        text = (text or "").strip()
        if not text:
            return cls()
        if not _TIMESTAMP.match(text):
            return cls(run_id=text)
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise TimeTravelError(
                f"--as-of {text!r} is not a timestamp: expected ISO 8601, e.g. 2026-11-26T08:00:00Z"
            ) from None
        return cls(when=when if when.tzinfo else when.replace(tzinfo=dt.UTC))

    def describe(self) -> str:
        if self.run_id:
            return f"as run {self.run_id} left it"
        if self.when:
            return f"as of {self.when.isoformat()}"
        return "now"


@dataclasses.dataclass(frozen=True)
class Target:
    """The snapshot to read (``snapshot_id``), or the time whose snapshot to read (``when``);
    neither: the current one."""

    snapshot_id: int | None = None
    when: dt.datetime | None = None


def run_target(found: tuple | None, layout: Layout, run_id: str) -> Target:
    """Where run ``run_id`` left the audit log, from ``runs.run_snapshots``'s answer
    ``found`` = (warehouse, {table: snapshot id}, finished_at) (pure)."""
    if found is None:
        raise TimeTravelError(f"no pipeline run {run_id!r}")
    warehouse, snapshots, finished_at = found
    if warehouse is not None and warehouse != layout.catalog:
        raise TimeTravelError(
            f"pipeline run {run_id!r} is of another warehouse ({warehouse}), not of "
            f"{layout.work} ({layout.catalog})"
        )
    if TABLE in snapshots:
        return Target(snapshot_id=snapshots[TABLE])
    if finished_at is None:
        raise TimeTravelError(
            f"pipeline run {run_id!r} has not finished and recorded no audit-log snapshot"
        )
    return Target(when=finished_at)  # it did not write the audit log: as it was then


@dataclasses.dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    snapshot_id: int | None  # None: the table had no snapshot then (no rows)
    next_after: int | None  # the --after of the next page, None when this is the last
    # The tombstone leaves of the page's seqs (``protocol.tlog.leaf.tombstone_ranges``):
    # (first, last, reason), filled by ``show``.
    tombstones: tuple[tuple[int, int, str], ...] = ()


def snapshot_of(table: Table, target: Target, what: str) -> int | None:
    """The snapshot id ``target`` names in ``table``, checked to still exist."""
    if target.when is not None:
        found = readers.snapshot_at(table, target.when)
        if found is None:
            _before_conversion(table, target.when, what)
        return found
    if target.snapshot_id is None:
        current = table.current_snapshot()
        return None if current is None else current.snapshot_id
    if table.snapshot_by_id(target.snapshot_id) is None:
        raise TimeTravelError(
            f"snapshot {target.snapshot_id} ({what}) no longer exists: maintenance expired it "
            f"(older than the snapshot retention)"
        )
    return target.snapshot_id


def _before_conversion(table: Table, when: dt.datetime, what: str) -> None:
    """Refuse a time before the table's history starts with a conversion from a hand-written
    layout (``spark_jobs.legacy``): its rows existed then, but no snapshot of them did."""
    history = table.history()
    first = table.snapshot_by_id(history[0].snapshot_id) if history else None
    if first is None or first.summary is None or not first.summary.get(LEGACY_PROPERTY):
        return
    raise TimeTravelError(
        f"{what} is not kept: {iso_ms(int(when.timestamp() * 1000))} is before the warehouse "
        f"was converted from its hand-written layout ({iso_ms(first.timestamp_ms)}), where its "
        f"history starts"
    )


def read_page(table: Table, snapshot_id: int | None, topic: str, after: int, limit: int) -> Page:
    """Up to ``limit`` rows of ``topic`` with seq > ``after`` at ``snapshot_id``."""
    from pyiceberg.expressions import And, EqualTo, GreaterThan

    if snapshot_id is None:
        return Page([], None, None)
    # pyiceberg's predicates take (name, value) at run time; mypy sees their pydantic fields.
    wanted = And(
        EqualTo("topic", topic),  # type: ignore[call-arg, arg-type]
        GreaterThan("seq", after),  # type: ignore[call-arg, arg-type]
    )
    found = readers.scan(table, snapshot_id, wanted)
    rows = found.sort_by([("seq", "ascending")]).slice(0, limit + 1).to_pylist()
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, snapshot_id, rows[-1]["seq"] if more else None)


def topics(table: Table, snapshot_id: int | None) -> list[str]:
    """The topics the audit log holds at ``snapshot_id``, from its partitions (no data read)."""
    if snapshot_id is None:
        return []
    parts = table.inspect.partitions(snapshot_id=snapshot_id).column("partition").to_pylist()
    return sorted({p["topic"] for p in parts})


def load(layout: Layout, database_url: str) -> Table:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return readers.load(layout, database_url, TABLE)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise TimeTravelError(
            f"warehouse {layout.work} has no audit log yet: no pipeline run has created it"
        ) from None


def resolve(conn: Any, layout: Layout, as_of: AsOf) -> Target:
    """``as_of`` as a snapshot or time, reading the run's row when it names a run."""
    if as_of.run_id is None:
        return Target(when=as_of.when)
    from watch_service.store import runs

    return run_target(runs.run_snapshots(conn, as_of.run_id), layout, as_of.run_id)


def page(
    layout: Layout,
    database_url: str,
    topic: str,
    as_of: AsOf,
    after: int,
    limit: int,
    source_url: str | None = None,
) -> Page:
    """The query of ``auditsync audit-log show``: up to ``limit`` rows of ``topic`` after seq
    ``after``, as ``as_of`` names the audit log, with the tombstone leaves of their seqs.
    ``database_url`` is the pipeline's (its run tables and catalog); the tombstones are the
    source's recorded gaps (``store.gap_reads``, read at ``source_url``, the pipeline's database
    when not given) between ``after`` and the page's last row (to the last gap on the last
    page), less the seqs the audit log holds."""
    import psycopg

    from watch_service.protocol.tlog.leaf import tombstone_ranges
    from watch_service.store.gap_reads import topic_gaps

    with psycopg.connect(database_url, autocommit=True) as conn:
        target = resolve(conn, layout, as_of)
    with psycopg.connect(source_url or database_url, autocommit=True) as conn:
        gaps = topic_gaps(conn, topic)
    table = load(layout, database_url)
    snapshot = snapshot_of(table, target, f"the audit log {as_of.describe()}")
    found = read_page(table, snapshot, topic, after, limit)
    held = [int(r["seq"]) for r in found.rows]
    tombstones = tombstone_ranges(gaps, after + 1, found.next_after, held)
    return dataclasses.replace(found, tombstones=tuple(tombstones))


# -- shared by the renderers (the command's and the plugin's) -------------------------------------
def iso_ms(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    )


def clip(text: str | None, width: int) -> str:
    text = "" if text is None else " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
