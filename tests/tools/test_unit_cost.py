"""The suite's cost-by-unit table (tests/unit_cost.py): its /proc parsing, tree sum and table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit_cost import parse_stat, table, tree_ticks

pytestmark = pytest.mark.unit


def test_stat_fields_count_from_the_last_parenthesis():
    line = "4242 (java) (x) S 17 4242 4242 0 -1 4194560 1 0 0 0 300 45 20 5 20 0 30 0 1 2 3"
    assert parse_stat(line) == (17, 300 + 45 + 20 + 5)


def test_a_real_stat_line_parses():
    ppid, ticks = parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert ppid == os.getppid() and ticks >= 0


def test_the_tree_sums_descendants_only():
    stats = {1: (0, 1000), 10: (1, 5), 11: (10, 7), 12: (11, 11), 20: (1, 100)}
    assert tree_ticks(10, stats) == 5 + 7 + 11
    assert tree_ticks(99, stats) == 0


def test_the_table_orders_by_cpu_and_totals_the_rest():
    rows = [{"unit": f"u{i}", "cpu_s": float(i), "wall_s": 2.0 * i} for i in range(1, 5)]
    lines = table(rows, shown=2)
    assert lines[1].split() == ["4.0", "8.0", "u4"]
    assert lines[2].split() == ["3.0", "6.0", "u3"]
    assert lines[3].split() == ["3.0", "6.0", "the", "other", "2", "units"]
    assert lines[4].split() == ["10.0", "all", "4", "units"]
