"""Landing retention, done: the segments ``landing_plan`` lets go are deleted through
``watch_service.storage`` (no Spark: a listing and deletes).

    python -m spark_jobs.steps.maintenance.landing --landing LOCATION --work LOCATION
        [--retention-hours 168]            (or AUDITSYNC_LANDING_RETENTION_HOURS)

The runs on record come from ``pipeline_runs`` of the warehouse's catalog (each passed run's
compact figures say how far it verified each consumer; a run that did not pass holds the
frames it compacted). Per consumer: one listing of its root, one of each day and hour folder
that may expire (``landing_plan``), the deletes. A run's cost follows the folders that
expire, not the history. Fault decisions (``faults/``, written only when fault injection is
on: tests and demos) are kept: the corruption budget counts the decisions on record, and a
restarted sink must meet the same fates.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from typing import Any

import psycopg

from spark_jobs.common import progress
from spark_jobs.common.cli import DATABASE_URL_ENV, PIPELINE_URL_ENV
from spark_jobs.steps.maintenance import landing_plan as lp
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.errors import AuditsyncError
from watch_service.protocol.landing_keys import DAY_RE, HOUR_RE, LEGACY, SegmentKey, parse_segment
from watch_service.storage import Storage

RUNS = """SELECT status, steps -> 'compact' FROM pipeline_runs
           WHERE warehouse = %(warehouse)s AND steps ? 'compact'"""


def run_marks(database_url: str, warehouse: str) -> dict[str, lp.Verified]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(RUNS, {"warehouse": warehouse}).fetchall()
    return lp.verified(rows)


def _keys(folder: str, files: list[tuple[str, float]]) -> tuple[list[SegmentKey], int]:
    keys, others = [], 0
    for name, modified in files:
        key = parse_segment(f"{folder}/{name}" if folder else name, modified)
        if key is None:
            others += 1
        else:
            keys.append(key)
    return keys, others


def _apply(store: Storage, plan: lp.FolderPlan, figures: dict[str, Any]) -> None:
    if plan.whole:
        store.delete_tree(plan.folder)
    else:
        for name in plan.delete:
            store.delete(name)
    figures["deleted"] += len(plan.delete)
    figures["kept"] += len(plan.keep)
    figures["folders_removed"] += int(plan.whole)


def expire_consumer(
    store: Storage, mark: lp.Verified, cutoff: dt.datetime, figures: dict[str, Any]
) -> None:
    """Delete one consumer's expired segments (``store``: its landing)."""
    folders, files = store.listing()
    figures["listings"] += 1
    keys, _ = _keys(LEGACY, files)
    _apply(store, lp.plan_folder(LEGACY, keys, 0, mark, cutoff), figures)
    for day in sorted(folders):
        if not DAY_RE.fullmatch(day) or not lp.day_may_expire(day, mark, cutoff):
            continue
        hours, day_files = store.listing(day)
        figures["listings"] += 1
        removed = 0
        for hour in sorted(hours):
            folder = f"{day}/{hour}"
            if not HOUR_RE.fullmatch(hour) or not lp.hour_may_expire(folder, mark, cutoff):
                continue
            _, hour_files = store.listing(folder)
            figures["listings"] += 1
            plan = lp.plan_folder(folder, *_keys(folder, hour_files), mark, cutoff)
            _apply(store, plan, figures)
            removed += int(plan.whole)
        if removed == len(hours) and not day_files and day < mark.folder.partition("/")[0]:
            store.delete_tree(day)  # emptied: a local folder would stay listed


def expire(
    landing: Storage, marks: dict[str, lp.Verified], hours: float, now: dt.datetime
) -> dict[str, Any]:
    """Every consumer's expired segments deleted; the figures."""
    cutoff = now - dt.timedelta(hours=hours)
    figures: dict[str, Any] = {
        "cutoff": cutoff.isoformat(),
        "consumers": 0,
        "listings": 1,
        "deleted": 0,
        "kept": 0,
        "folders_removed": 0,
    }
    for consumer in landing.folders():
        mark = marks.get(consumer)
        if mark is None:  # nothing verified by a passed run: nothing goes
            continue
        figures["consumers"] += 1
        expire_consumer(landing.child(consumer), mark, cutoff, figures)
    return figures


def run(
    landing: str | Storage,
    work: str,
    database_url: str,
    hours: float,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    store = landing if isinstance(landing, Storage) else Storage.at(landing)
    catalog = Layout(store.location.uri, work, "").catalog
    marks = run_marks(database_url, catalog)
    return expire(store, marks, hours, now or dt.datetime.now(dt.UTC))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m spark_jobs.steps.maintenance.landing",
        description="Delete landing segments compacted, reconciled and verified by a passed "
        "run and older than the retention.",
    )
    parser.add_argument("--landing", required=True, help="the landing zone: path or URI")
    parser.add_argument("--work", required=True, help="the warehouse: path or URI")
    parser.add_argument(
        "--retention-hours",
        default=None,
        help=f"keep segments this recent (default: {lp.SETTING}, else {lp.DEFAULT_HOURS})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure()
    try:
        hours = lp.retention_hours(
            args.retention_hours if args.retention_hours is not None else os.environ.get(lp.SETTING)
        )
        url = os.environ.get(PIPELINE_URL_ENV) or os.environ.get(DATABASE_URL_ENV)
        if not url:
            raise AuditsyncError(
                f"neither {PIPELINE_URL_ENV} nor {DATABASE_URL_ENV} is set (the run tables' "
                "database)"
            )
        figures = run(args.landing, args.work, url, hours)
    except AuditsyncError as exc:  # RetentionSettingError is one
        progress.say(f"[landing retention] {exc}", sys.stderr, level="ERROR")
        return 2
    except psycopg.OperationalError as exc:
        progress.say(
            f"[landing retention] cannot use the database: {exc}".rstrip(), sys.stderr, "ERROR"
        )
        return 2
    print(json.dumps(figures, sort_keys=True))  # a JSON line in either format
    return 0


if __name__ == "__main__":
    sys.exit(main())
