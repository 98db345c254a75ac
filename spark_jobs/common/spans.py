"""Inclusive seq ranges merged, as pure Python (no pyspark: the Airflow plugin's alerts use it
too): the one rule for "overlapping or adjacent ranges are one range"."""

from __future__ import annotations

from collections.abc import Iterable


def merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges sorted, overlapping or adjacent ones merged: (9, 9), (3, 4), (5, 5) →
    (3, 5), (9, 9)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
