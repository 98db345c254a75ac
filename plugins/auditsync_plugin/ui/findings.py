"""The plugin's findings view: one run's defect ranges (consumer, topic, status, seq range,
repaired or not), filtered and paged (``paging.page_of``, as the runs table), and the same as a
CSV download. The rows come from ``spark_jobs.findings`` (pyiceberg: no JVM in the API server);
the page sizes, :class:`View`, :func:`render` and :func:`render_csv` are the plugin's and pure,
the HTML the autoescaped Jinja template ``templates/findings.html``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from spark_jobs import findings

from .paging import page_of
from .templating import template

PAGE_ROWS = 50  # the view's default page size
PAGE_SIZES = (10, 25, 50, 100, 200)  # what the view offers


def page_size(raw: str) -> int:
    """A page size the view offers, from its ``rows`` query value; anything else (empty, a typo,
    a size not offered) is the default, as a bad page number is the first page."""
    value = raw.strip()
    return int(value) if value.isdigit() and int(value) in PAGE_SIZES else PAGE_ROWS


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
    size: int = PAGE_ROWS  # rows per page

    def link(self, page: int) -> str:
        rows = {} if self.size == PAGE_ROWS else {"rows": self.size}
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
    size: int = PAGE_ROWS,
) -> View:
    kept = findings.select(rows, filters)
    shown, number, pages = page_of(kept, page, size)
    choices = findings.choices(rows)
    return View(run, filters, shown, choices, len(rows), len(kept), number, pages, size=size)


def render(v: View) -> str:
    page = template("findings.html")
    return str(page.render(view=v, columns=findings.COLUMNS, sizes=PAGE_SIZES))
