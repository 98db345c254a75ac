"""The audit log as a pipeline run left it, or as it was at a given time: Iceberg time travel
from Python (pyiceberg through ``spark_jobs.warehouse.readers``, no JVM), shared by the command

    auditsync audit-log show --topic T --work LOCATION [--as-of RUN_ID|TIMESTAMP]
                             [--after SEQ] [--limit N] [--json] [--database-url URL]

and the Airflow plugin's audit-log page (the same command's ``key``, ``keygen``, ``publish``,
``prove`` and ``verify``, the audit log's signed transparency log, are
``spark_jobs.tlog_command``). ``--as-of RUN_ID`` reads the snapshot the run recorded
(``pipeline_runs.snapshots['audit_log']``; a run that did not write the audit log left it as it
was when the run finished); ``--as-of 2026-11-26T08:00:00Z`` the snapshot
current then; no ``--as-of``, the table now. Rows come in seq order, one topic, a page at a
time (``--after`` the last seq seen). Anything that cannot be read is a ``TimeTravelError``
(or the storage module's ``StorageError``: an ``AuditsyncError``) whose message says why in one
line; the command prints it and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import LEGACY_PROPERTY, Layout
from watch_service.protocol.errors import AuditsyncError

if TYPE_CHECKING:
    from pyiceberg.table import Table

TABLE = "audit_log"
DEFAULT_LIMIT = 100
DATA_WIDTH = 60
COLUMNS = ("topic", "seq", "ts", "tag", "node", "meta", "data", "data_sha256", "origin", "run_id")
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


# -- the command ---------------------------------------------------------------------------------
def iso_ms(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    )


def clip(text: str | None, width: int) -> str:
    text = "" if text is None else " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(rows: Sequence[Mapping[str, Any]], width: int = DATA_WIDTH) -> str:
    """seq, ts, origin and the data clipped to ``width``, one line per row (pure)."""
    lines = [f"{'seq':>10}  {'ts':<24}  {'origin':<10}  data"]
    for r in rows:
        lines.append(
            f"{r['seq']:>10}  {iso_ms(r['ts']):<24}  {r['origin']:<10}  {clip(r['data'], width)}"
        )
    return "\n".join(lines)


def render_json(
    rows: Sequence[Mapping[str, Any]],
    tombstones: Sequence[tuple[int, int, str]] = (),
    topic: str | None = None,
) -> str:
    """One JSON object per row and line, every column, dates as ISO text; between them, in seq
    order, one object per tombstone range (``topic``, ``seq``, ``seq_to``, ``leaf``:
    ``"tombstone"``, ``reason``) of ``topic`` (pure)."""
    items: list[tuple[int, dict[str, Any]]] = [
        (int(r["seq"]), {k: r.get(k) for k in (*COLUMNS, "date")}) for r in rows
    ]
    items += [
        (a, {"topic": topic, "seq": a, "seq_to": b, "leaf": "tombstone", "reason": reason})
        for a, b, reason in tombstones
    ]
    return "\n".join(
        json.dumps(obj, default=str, ensure_ascii=False)
        for _, obj in sorted(items, key=lambda item: item[0])
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="auditsync audit-log", description="The warehouse's audit log, at any snapshot."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show", help="print one topic's audit log as a run left it")
    show.add_argument("--topic", required=True)
    show.add_argument("--work", required=True, help="the warehouse: a path, file:// or s3://")
    show.add_argument(
        "--as-of",
        default=None,
        metavar="RUN_ID|TIMESTAMP",
        help="a pipeline run id, or an ISO 8601 time such as 2026-11-26T08:00:00Z (default: now)",
    )
    show.add_argument("--after", type=int, default=0, metavar="SEQ", help="rows after this seq")
    show.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="at most N rows")
    show.add_argument("--json", action="store_true", help="one JSON object per line")
    show.add_argument(
        "--database-url", default=None, help="default: DATABASE_URL, else the embedded cluster"
    )
    show.add_argument(
        "--pipeline-database-url",
        dest="pipeline_url",
        default=None,
        help="the pipeline's own state (default: AUDITSYNC_PIPELINE_DATABASE_URL, else the "
        "source's database)",
    )
    from spark_jobs import tlog_command

    tlog_command.add_parsers(sub)
    return parser


def show(args: argparse.Namespace, database_url: str, source_url: str | None = None) -> Page:
    """One page of the audit log as ``--as-of`` left it, with the tombstone leaves of its seqs.
    ``database_url`` is the pipeline's (its run tables and catalog); the tombstones are the
    source's recorded gaps (``store.gap_reads``, read at ``source_url``, the pipeline's database
    when not given) between ``--after`` and the page's last row (to the last gap on the last
    page), less the seqs the audit log holds."""
    import psycopg

    from watch_service.protocol.tlog.leaf import tombstone_ranges
    from watch_service.store.gap_reads import topic_gaps

    layout = Layout("", args.work, "")
    as_of = AsOf.parse(args.as_of)
    with psycopg.connect(database_url, autocommit=True) as conn:
        target = resolve(conn, layout, as_of)
    with psycopg.connect(source_url or database_url, autocommit=True) as conn:
        gaps = topic_gaps(conn, args.topic)
    table = load(layout, database_url)
    snapshot = snapshot_of(table, target, f"the audit log {as_of.describe()}")
    page = read_page(table, snapshot, args.topic, args.after, args.limit)
    held = [int(r["seq"]) for r in page.rows]
    found = tombstone_ranges(gaps, args.after + 1, page.next_after, held)
    return dataclasses.replace(page, tombstones=tuple(found))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action != "show":
        from spark_jobs import tlog_command

        return tlog_command.run(args)
    if args.limit < 1:
        print("auditsync audit-log: --limit must be at least 1", file=sys.stderr)
        return 2
    import psycopg

    from spark_jobs.runner import _database_url, _pipeline_url

    try:
        Layout("", args.work, "")
        source = _database_url(args.database_url)
        page = show(args, _pipeline_url(args.pipeline_url, source), source)
    except AuditsyncError as exc:  # TimeTravelError, StorageError, settings, the cluster
        print(f"auditsync audit-log: {exc}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as exc:
        print(f"auditsync audit-log: cannot use the database: {exc}".rstrip(), file=sys.stderr)
        return 2
    if args.json:
        if page.rows or page.tombstones:
            print(render_json(page.rows, page.tombstones, args.topic))
    else:
        print(render_table(page.rows))
        where = "no snapshot yet" if page.snapshot_id is None else f"snapshot {page.snapshot_id}"
        more = "" if page.next_after is None else f"; more after seq {page.next_after}"
        print(f"({len(page.rows)} rows of {args.topic}, {where}{more})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
