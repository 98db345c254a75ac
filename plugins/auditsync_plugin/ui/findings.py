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

    def link(self, page: int) -> str:
        return "findings?" + urlencode({"run": self.run, **self.filters.query(), "page": page})

    @property
    def csv_link(self) -> str:
        return "findings.csv?" + urlencode({"run": self.run, **self.filters.query()})


def view(run: str, rows: Sequence[Mapping[str, Any]], filters: findings.Filters, page: int) -> View:
    kept = findings.select(rows, filters)
    shown, number, pages = findings.page_of(kept, page)
    return View(run, filters, shown, findings.choices(rows), len(rows), len(kept), number, pages)


def render(v: View) -> str:
    return str(template("findings.html").render(view=v, columns=findings.COLUMNS))
