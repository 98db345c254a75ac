"""The page's chart: delivered records, defects found and defects left over recent runs, as an
inline SVG (no script, no CDN). Pure: run points in, markup out.

Two panels share the run axis, because delivered records (thousands) and defects (a handful)
differ by orders of magnitude: the top panel has one bar per run for delivered records, the
bottom one a pair of bars per run, defects found and defects left. Each bar carries its value
in a ``<title>`` (the browser's tooltip) and ``data-run`` / ``data-value`` attributes.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from spark_jobs.common.statuses import DELIVERED, VERDICTS

from .report import RunPoint

WIDTH, PANEL_H, GAP, LEFT, BOTTOM = 720, 110, 34, 56, 22
SERIES = (  # (attribute, css class, legend); a status's word is its verdict table label
    ("delivered", "bar-delivered", f"{VERDICTS[DELIVERED].label} records"),
    ("defects_found", "bar-found", "defects found"),
    ("defects_left", "bar-left", "defects left"),
)


def _nice_max(value: int) -> int:
    """The smallest 1/1.5/2/2.5/3/4/5/6/8 × 10^k at or above ``value`` (at least 1): the
    axis top, so the tallest bar fills most of its panel."""
    step = 1
    while True:
        for factor in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8):
            if step * factor >= value:
                return max(1, int(step * factor))
        step *= 10


def _bar(css: str, point: RunPoint, value: int, x: float, w: float, top: float, scale: int) -> str:
    h = PANEL_H * value / scale
    label = html.escape(f"{point.run_id}: {value}", quote=True)
    return (
        f'<rect class="{css}" x="{x:.1f}" y="{top + PANEL_H - h:.1f}" width="{w:.1f}" '
        f'height="{h:.1f}" data-run="{html.escape(point.run_id, quote=True)}" '
        f'data-value="{value}"><title>{label}</title></rect>'
    )


def _axis(top: float, scale: int, caption: str) -> str:
    return (
        f'<line class="axis" x1="{LEFT}" y1="{top + PANEL_H}" x2="{WIDTH}" y2="{top + PANEL_H}"/>'
        f'<text class="tick" x="{LEFT - 6}" y="{top + 4}" text-anchor="end">{scale}</text>'
        f'<text class="tick" x="{LEFT - 6}" y="{top + PANEL_H}" text-anchor="end">0</text>'
        f'<text class="caption" x="{LEFT}" y="{top - 6}">{html.escape(caption)}</text>'
    )


def render(points: Sequence[RunPoint]) -> str:
    """The chart's ``<svg>``, or a sentence when there is no run to draw."""
    if not points:
        return '<p class="muted">no runs to chart yet</p>'
    slot = (WIDTH - LEFT) / len(points)
    bar_w = min(48.0, slot * 0.7)
    top1, top2 = 18.0, 18.0 + PANEL_H + GAP
    height = top2 + PANEL_H + BOTTOM
    delivered_max = _nice_max(max(p.delivered for p in points))
    defects_max = _nice_max(max(p.defects_found for p in points))
    parts = [_axis(top1, delivered_max, "delivered records"), _axis(top2, defects_max, "defects")]
    for i, point in enumerate(points):
        x = LEFT + i * slot + (slot - bar_w) / 2
        parts.append(_bar("bar-delivered", point, point.delivered, x, bar_w, top1, delivered_max))
        half = bar_w / 2
        parts.append(_bar("bar-found", point, point.defects_found, x, half, top2, defects_max))
        parts.append(_bar("bar-left", point, point.defects_left, x + half, half, top2, defects_max))
        parts.append(
            f'<text class="tick run-{html.escape(point.run_status, quote=True)}" '
            f'x="{x + bar_w / 2:.1f}" y="{height - 6}" text-anchor="middle">#{i + 1}</text>'
        )
    legend = (
        '<span class="muted">runs oldest → newest; a bar\'s tooltip names its run</span>'
        + "".join(
            f'<span class="key"><i class="swatch {css}"></i>{html.escape(text)}</span>'
            for _, css, text in SERIES
        )
    )
    return (
        f'<svg id="chart" role="img" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'preserveAspectRatio="xMinYMin meet" data-runs="{len(points)}" '
        f'aria-label="{", ".join(text for _, _, text in SERIES[:-1])} and {SERIES[-1][2]} over '
        f'the last {len(points)} runs">{"".join(parts)}</svg><div class="legend">{legend}</div>'
    )
