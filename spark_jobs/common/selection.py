"""Filtering and paging, defined once for every table of results a user reads: a run's findings
(``auditsync pipeline findings``, the Reconciliation page's findings view and its CSV download)
and the page's runs table. Pure: rows in, rows out; the CLI and the plugin render them.

A filter holds one wanted value per column (a ``str`` field of a :class:`Filters` subclass); an
empty value keeps every row. A row is a mapping or an object with those attributes. A page is
page ``number`` of the rows a filter kept, clamped to 1..pages, so a page past the end shows the
last and a page before the first shows the first. A page number or size read from a query string
that is not one (empty, a typo, a size not offered) is the default, as a bad page is the first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, Self, TypeVar

T = TypeVar("T")

RUNS_PAGE = 20  # the runs table's lines per page
FINDINGS_PAGE = 50  # the findings view's default rows per page
FINDINGS_PAGE_SIZES = (10, 25, 50, 100, 200)  # the sizes the findings view offers


def _value(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, Mapping) else getattr(row, name)


@dataclasses.dataclass(frozen=True)
class Filters:
    """The base of a table's filters: a subclass declares its columns as ``str`` fields (and
    may carry a page number beside them)."""

    @classmethod
    def from_query(cls, **values: str | None) -> Self:
        """The filters from query values as typed: surrounding blanks dropped, absent = any."""
        return cls(**{name: (value or "").strip() for name, value in values.items()})

    def columns(self) -> dict[str, str]:
        """Each filtered column and its wanted value ("" keeps every row), in field order."""
        values = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {name: value for name, value in values if isinstance(value, str)}

    def keeps(self, row: Any) -> bool:
        return all(not want or _value(row, name) == want for name, want in self.columns().items())

    def query(self) -> dict[str, str]:
        """The filters that choose something, as query parameters (links keep them)."""
        return {name: want for name, want in self.columns().items() if want}


def select(rows: Iterable[T], filters: Filters) -> list[T]:
    """The rows ``filters`` keeps, in their order."""
    return [row for row in rows if filters.keeps(row)]


def choices(rows: Iterable[Any], names: Sequence[str]) -> dict[str, list[str]]:
    """The values each named filter can take: the rows' own, sorted, the empty one left out."""
    rows = list(rows)
    return {name: sorted({v for row in rows if (v := _value(row, name))}) for name in names}


@dataclasses.dataclass(frozen=True)
class Page(Generic[T]):
    lines: list[T]  # the rows this page shows
    number: int
    pages: int
    total: int  # the rows kept, over every page


def page_of(rows: Sequence[T], number: int, size: int) -> tuple[list[T], int, int]:
    """(the rows of page ``number``, clamped to 1..pages, that page number, the page count)."""
    pages = max(1, -(-len(rows) // size))
    number = min(max(1, number), pages)
    return list(rows[(number - 1) * size : number * size]), number, pages


def paginate(kept: Sequence[T], number: int, size: int) -> Page[T]:
    """Page ``number`` of ``kept`` (rows already filtered)."""
    shown, number, pages = page_of(kept, number, size)
    return Page(shown, number, pages, len(kept))


def page_number(raw: str | None) -> int:
    """A page number from a query value; anything that is not a positive number is page 1."""
    try:
        return max(1, int(raw or 1))
    except ValueError:
        return 1


def page_size(raw: str) -> int:
    """A page size the findings view offers, from its ``rows`` query value; anything else
    (empty, a typo, a size not offered) is the default."""
    value = raw.strip()
    return int(value) if value.isdigit() and int(value) in FINDINGS_PAGE_SIZES else FINDINGS_PAGE
