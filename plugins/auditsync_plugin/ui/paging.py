"""Paging, defined once for the plugin's tables (the runs table and a run's findings): page
``number`` of rows already filtered, clamped to 1..pages, so a page past the end shows the
last and a page before the first shows the first (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def page_of(rows: Sequence[T], number: int, size: int) -> tuple[list[T], int, int]:
    """(the rows of page ``number``, clamped to 1..pages, that page number, the page count)."""
    pages = max(1, -(-len(rows) // size))
    number = min(max(1, number), pages)
    return list(rows[(number - 1) * size : number * size]), number, pages
