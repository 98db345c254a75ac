"""The plugin's findings view: one run's defect ranges (consumer, topic, status, seq range,
repaired or not), filtered and paged, and the same as a CSV download. The rows come from
``spark_jobs.findings`` (pyiceberg: no JVM in the API server); :class:`View` and
:func:`render` are pure, the HTML the autoescaped Jinja template ``templates/findings.html``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from spark_jobs import findings

from .templating import template


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
    size: int = findings.PAGE_ROWS  # rows per page

    def link(self, page: int) -> str:
        rows = {} if self.size == findings.PAGE_ROWS else {"rows": self.size}
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
    size: int = findings.PAGE_ROWS,
) -> View:
    kept = findings.select(rows, filters)
    shown, number, pages = findings.page_of(kept, page, size)
    choices = findings.choices(rows)
    return View(run, filters, shown, choices, len(rows), len(kept), number, pages, size=size)


def render(v: View) -> str:
    page = template("findings.html")
    return str(page.render(view=v, columns=findings.COLUMNS, sizes=findings.PAGE_SIZES))
