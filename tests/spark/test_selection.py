"""Filters and pages, the one rule every table of results uses (``spark_jobs.common.selection``):
the findings (the CLI, the findings view, its CSV) and the Reconciliation page's runs table."""

from __future__ import annotations

import dataclasses

import pytest

from spark_jobs.common import selection

pytestmark = pytest.mark.unit


@dataclasses.dataclass(frozen=True)
class Chosen(selection.Filters):
    topic: str = ""
    consumer: str = ""
    page: int = 1


@dataclasses.dataclass(frozen=True)
class Line:
    topic: str
    consumer: str


def test_filters_keep_mappings_and_objects_by_their_columns():
    chosen = Chosen.from_query(topic=" orders ", consumer=None)
    assert chosen == Chosen("orders", "", 1)
    assert chosen.columns() == {"topic": "orders", "consumer": ""}  # the page is no column
    assert chosen.query() == {"topic": "orders"}
    rows = [{"topic": "orders", "consumer": "c1"}, {"topic": "pay", "consumer": "c1"}]
    assert selection.select(rows, chosen) == rows[:1]
    lines = [Line("orders", "c2"), Line("", "c2"), Line("pay", "c1")]
    assert selection.select(lines, Chosen(consumer="c2")) == lines[:2]
    assert selection.select(lines, Chosen()) == lines
    assert selection.choices(lines, ("topic", "consumer")) == {
        "topic": ["orders", "pay"],  # a line without a topic offers none
        "consumer": ["c1", "c2"],
    }


def test_pages_are_clamped_and_bad_query_values_are_the_defaults():
    page = selection.paginate(list(range(45)), 3, 20)
    assert (page.lines, page.number, page.pages, page.total) == (list(range(40, 45)), 3, 3, 45)
    assert selection.paginate(list(range(45)), 99, 20).number == 3
    assert selection.paginate([], 0, 20) == selection.Page([], 1, 1, 0)
    numbers = [selection.page_number(x) for x in ("2", " 3 ", "", None, "x", "-3", "0")]
    assert numbers == [2, 3, 1, 1, 1, 1, 1]
    assert selection.page_size("25") == 25 and selection.page_size("30") == selection.FINDINGS_PAGE
