"""``auditsync pipeline findings``: a run's findings printed (the query is
``spark_jobs.findings.read``, which returns data; the rendering is here).

    auditsync pipeline findings --run RUN_ID [--work LOCATION] [--json]
                                [--status S] [--consumer C] [--topic T] [--database-url URL]

A table (one line per defect range, then a count), or with ``--json`` one JSON object per
range and line. Anything that cannot be read is printed as one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spark_jobs.common.selection import select
from spark_jobs.common.statuses import DEFECTS
from spark_jobs.findings import COLUMNS, Filters, read
from watch_service.protocol.errors import AuditsyncError

FILTERED = tuple(Filters().columns())  # the --consumer, --topic and --status options


def render_json(rows: Iterable[Mapping[str, Any]]) -> str:
    """One JSON object per range and line."""
    return "\n".join(json.dumps({k: r[k] for k in COLUMNS}, ensure_ascii=False) for r in rows)


def render_table(rows: Sequence[Mapping[str, Any]]) -> str:
    widths = {k: max([len(k), *(len(str(r[k])) for r in rows)]) for k in COLUMNS}
    line = "  ".join(f"{{{k}:<{widths[k]}}}" for k in COLUMNS)
    return "\n".join(line.format(**r).rstrip() for r in [{k: k for k in COLUMNS}, *rows])


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``findings`` subcommand's parser; the runner adds the database URLs."""
    p = sub.add_parser("findings", help="print a run's defect ranges and whether each was repaired")
    p.add_argument("--run", required=True, metavar="RUN_ID")
    p.add_argument("--work", default=None, help="the warehouse (default: the run's own)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    for name in FILTERED:
        p.add_argument(f"--{name}", default="", help=f"only this {name}")
    return p


def main(args: argparse.Namespace, database_url: str) -> int:
    if args.status and args.status not in DEFECTS:
        print(
            f"auditsync pipeline findings: --status {args.status!r}: expected one of "
            f"{', '.join(DEFECTS)}",
            file=sys.stderr,
        )
        return 2
    try:
        rows = read(database_url, args.run, args.work)
    except AuditsyncError as exc:  # FindingsError, StorageError
        print(f"auditsync pipeline findings: {exc}", file=sys.stderr)
        return 2
    kept = select(rows, Filters.from_query(**{n: getattr(args, n) for n in FILTERED}))
    if args.json:
        if kept:
            print(render_json(kept))
    else:
        print(render_table(kept))
        print(f"({len(kept)} of {len(rows)} defect ranges of run {args.run})")
    return 0
