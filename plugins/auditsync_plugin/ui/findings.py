"""The plugin's findings view: one run's defect ranges (consumer, topic, status, seq range,
repaired or not), filtered and paged by ``spark_jobs.common.selection`` (as the runs table and
``auditsync pipeline findings`` are), and the same as a CSV download. The rows come from
``spark_jobs.findings`` (pyiceberg: no JVM in the API server); :class:`View`, :func:`render`
and :func:`render_csv` are pure, the HTML the autoescaped Jinja template
``templates/findings.html``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from spark_jobs import findings
from spark_jobs.common import selection

from .templating import template


def render_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, findings.COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows({k: r[k] for k in findings.COLUMNS} for r in rows)
    return out.getvalue()


@dataclasses.dataclass(frozen=True)
class View:
    run: str
    filters: findings.Filters
    rows: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    choices: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    total: int = 0  # the run's ranges before filtering
    kept: int = 0  # after filtering
    page: int = 1
    pages: int = 1
    error: str | None = None
    size: int = selection.FINDINGS_PAGE  # rows per page

    def link(self, page: int) -> str:
        rows = {} if self.size == selection.FINDINGS_PAGE else {"rows": self.size}
        query = {"run": self.run, **self.filters.query(), **rows, "page": page}
        return "findings?" + urlencode(query)

    @property
    def csv_link(self) -> str:
        return "findings.csv?" + urlencode({"run": self.run, **self.filters.query()})


def view(
    run: str,
    rows: Sequence[Mapping[str, Any]],
    filters: findings.Filters,
    page: int,
    size: int = selection.FINDINGS_PAGE,
) -> View:
    shown = selection.paginate(selection.select(rows, filters), page, size)
    choices = selection.choices(rows, list(filters.columns()))
    kept, number, pages = shown.total, shown.number, shown.pages
    return View(run, filters, shown.lines, choices, len(rows), kept, number, pages, size=size)


def render(v: View) -> str:
    page = template("findings.html")
    return str(page.render(view=v, columns=findings.COLUMNS, sizes=selection.FINDINGS_PAGE_SIZES))
