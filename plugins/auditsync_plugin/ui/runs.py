"""Recent reconciliation runs, per topic, for the plugin's page.

:func:`fetch` reads the pipeline's run tables through ``watch_service.store.runs``;
:func:`pivot` turns its (run, consumer, topic, status, net count, remaining) rows into one line
per topic, and :func:`render_page` makes the HTML. Everything but :func:`fetch` is pure.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass
class TopicLine:
    run_id: str
    run_status: str
    finished_at: str
    consumer: str
    topic: str
    delivered: int = 0
    duplicates: int = 0
    tombstoned: int = 0
    silent_gaps: int = 0
    backfilled: int = 0
    defects_left: int = 0


COLUMNS = (
    ("run_id", "run"),
    ("run_status", "status"),
    ("finished_at", "finished"),
    ("consumer", "consumer"),
    ("topic", "topic"),
    ("delivered", "delivered"),
    ("duplicates", "duplicates"),
    ("tombstoned", "tombstoned"),
    ("silent_gaps", "silent gaps found"),
    ("backfilled", "backfilled"),
    ("defects_left", "defects left"),
)


def pivot(
    rows: Iterable[Mapping[str, Any]], repairable: tuple[str, ...], defects: tuple[str, ...]
) -> list[TopicLine]:
    """One line per (run, consumer, topic). A defect's ``remaining`` is what verify found
    left after backfill (None: verify has not run, so all of it is left); repairable defects
    found minus those left were backfilled."""
    lines: dict[tuple[str, str, str], TopicLine] = {}
    for row in rows:
        key = (row["run_id"], row["consumer"], row["topic"])
        line = lines.get(key)
        if line is None:
            finished = row.get("finished_at")
            line = lines[key] = TopicLine(
                row["run_id"],
                str(row.get("run_status") or ""),
                "" if finished is None else str(finished)[:19],
                row["consumer"],
                row["topic"],
            )
        status, count = row["status"], int(row["count"])
        left = count if row.get("remaining") is None else int(row["remaining"])
        if status == "delivered":
            line.delivered += count
        elif status == "duplicate":
            line.duplicates += count
        elif status == "tombstoned":
            line.tombstoned += count
        elif status == "silent_gap":
            line.silent_gaps += count
        if status in defects:
            line.defects_left += left
        if status in repairable:
            line.backfilled += count - left
    return list(lines.values())


def _cell(value: Any, warn: bool = False) -> str:
    cls = ' class="bad"' if warn else ""
    return f"<td{cls}>{html.escape(str(value))}</td>"


def render_page(lines: list[TopicLine], docs_available: bool, error: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in COLUMNS)
    body = []
    for line in lines:
        cells = "".join(
            _cell(getattr(line, name), warn=name == "defects_left" and line.defects_left > 0)
            for name, _ in COLUMNS
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(COLUMNS)}">no reconciliation runs yet</td></tr>')
    docs = (
        '<a id="data-docs" href="docs/index.html">Great Expectations Data Docs</a>'
        if docs_available
        else "<span>no Data Docs yet: no checkpoint has run</span>"
    )
    problem = f'<p class="bad" id="error">{html.escape(error)}</p>' if error else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>auditsync reconciliation</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: .3rem .6rem; text-align: right; }}
th {{ background: #f3f3f3; }}
td:nth-child(-n+5), th:nth-child(-n+5) {{ text-align: left; }}
td:nth-child(3) {{ white-space: nowrap; }}
.bad {{ color: #b00020; font-weight: bold; }}
</style></head>
<body>
<h1>auditsync: recent reconciliation runs</h1>
<p>{docs}</p>
{problem}
<table id="runs"><thead><tr>{head}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
</body></html>
"""


def fetch(conninfo: Mapping[str, Any], limit: int = 20) -> list[dict[str, Any]]:
    """The newest runs' rows (``watch_service.store.runs.recent_runs``)."""
    import psycopg

    from watch_service.store import runs

    with psycopg.connect(**conninfo, connect_timeout=5, autocommit=True) as conn:
        return runs.recent_runs(conn, limit)
