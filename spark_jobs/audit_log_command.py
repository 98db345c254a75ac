"""``auditsync audit-log``: the command over the warehouse's audit log.

    auditsync audit-log show --topic T --work LOCATION [--as-of RUN_ID|TIMESTAMP]
                             [--after SEQ] [--limit N] [--json] [--database-url URL]

``show`` prints one topic's rows as a pipeline run left them, or as they were at a time: the
query is ``spark_jobs.time_travel.page`` (it returns data), the rendering is here. ``key``,
``keygen``, ``publish``, ``prove`` and ``verify``, the audit log's signed transparency log, are
``spark_jobs.tlog_command``'s. Anything that cannot be read is printed as one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from spark_jobs import time_travel
from spark_jobs.time_travel import clip, iso_ms
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.errors import AuditsyncError

DEFAULT_LIMIT = 100
DATA_WIDTH = 60
COLUMNS = ("topic", "seq", "ts", "tag", "node", "meta", "data", "data_sha256", "origin", "run_id")


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
    from spark_jobs import tlog_cli

    tlog_cli.add_parsers(sub)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action != "show":
        from spark_jobs import tlog_cli

        return tlog_cli.run(args)
    if args.limit < 1:
        print("auditsync audit-log: --limit must be at least 1", file=sys.stderr)
        return 2
    import psycopg

    from spark_jobs.runner import _database_url, _pipeline_url

    try:
        layout = Layout("", args.work, "")
        source = _database_url(args.database_url)
        url = _pipeline_url(args.pipeline_url, source)
        as_of = time_travel.AsOf.parse(args.as_of)
        page = time_travel.page(
            layout, url, args.topic, as_of, args.after, args.limit, source_url=source
        )
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
