"""The Reconciliation page's pure core: filters and paging, each topic's verdict, the chart's
points and bars, the lag table, and the Data Docs rewrite that swaps every CDN URL GX 1.24.1's
templates load for the plugin's own copy (checked against the installed GX templates)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from auditsync_plugin.ui import assets, chart, report
from auditsync_plugin.ui.app import gx_images_dir, static_file, vendor_base
from auditsync_plugin.ui.page import render_page
from auditsync_plugin.ui.runs import TopicLine

pytestmark = pytest.mark.unit
TEMPLATES = gx_images_dir().parent.parent / "templates"


def line(run: str, topic: str, consumer: str = "c1", **figures: int) -> TopicLine:
    status = "failed" if figures.get("defects_left") else "passed"
    return TopicLine(run, status, "2025-06-01 12:00:03", consumer, topic, **figures)


# Newest run first, as runs.pivot gives them.
LINES = [
    line("r3", "orders", delivered=400, backfilled=0, defects_left=1),
    line("r3", "payments", delivered=300),
    line("r2", "orders", delivered=380, backfilled=12),
    line("r2", "payments", "c2", delivered=290),
    line("r1", "orders", delivered=100),
]


def test_filters_keep_a_topic_and_a_consumer_and_page_the_rest():
    assert [x.run_id for x in report.select(LINES, report.Filters("orders")).lines] == [
        "r3",
        "r2",
        "r1",
    ]
    assert len(report.select(LINES, report.Filters(consumer="c2")).lines) == 1
    second = report.select(LINES, report.Filters(page=2), size=2)
    assert (second.number, second.pages, second.total) == (2, 3, 5)
    assert [x.topic for x in second.lines] == ["orders", "payments"]
    past_the_end = report.select(LINES, report.Filters(page=99), size=2)
    assert past_the_end.number == 3 and len(past_the_end.lines) == 1
    assert report.Filters.parse(" orders ", None, "x") == report.Filters("orders", "", 1)
    assert report.Filters.parse(None, None, "-3").page == 1


def test_each_topic_shows_its_newest_verdict():
    states = {(s.consumer, s.topic): s.verdict for s in report.topic_states(LINES)}
    assert states == {
        ("c1", "orders"): report.DEFECTS_LEFT,
        ("c1", "payments"): report.CLEAN,
        ("c2", "payments"): report.CLEAN,
    }
    assert report.verdict(line("r", "t", backfilled=3)) == report.REPAIRED
    running = TopicLine("r", "running", "", "c", "t")
    assert report.verdict(running) == report.RUNNING


def test_the_chart_has_one_point_per_run_oldest_first():
    points = report.run_points(LINES)
    assert [(p.run_id, p.delivered, p.defects_found, p.defects_left) for p in points] == [
        ("r1", 100, 0, 0),
        ("r2", 670, 12, 0),
        ("r3", 700, 1, 1),
    ]
    assert [p.run_id for p in report.run_points(LINES, limit=2)] == ["r2", "r3"]
    svg = chart.render(points)
    for css in ("bar-delivered", "bar-found", "bar-left"):
        assert svg.count(f'<rect class="{css}"') == 3
    assert 'data-runs="3"' in svg and 'data-run="r3" data-value="700"' in svg
    assert "no runs to chart yet" in chart.render([])


def test_lags_compare_the_head_with_the_sink_and_the_reconciled_seq():
    progress = [
        {"consumer": "c1", "topic": "orders", "head_seq": 500, "reconciled_through": 400},
        {"consumer": "c1", "topic": "gone", "head_seq": None, "reconciled_through": 10},
    ]
    lags = report.lags(progress, {("c1", "orders"): 480})
    assert [(x.sink_behind, x.unreconciled) for x in lags] == [(20, 100), (None, None)]
    page = render_page(LINES, True, filters=report.Filters("orders"), lags=lags)
    assert '<table id="lags"' in page and "<td>gone</td>" not in page
    assert page.count('<li class="card') == 1 and 'data-verdict="defects"' in page
    assert '<option value="orders" selected>' in page and 'href="static/report.css"' in page


def test_a_rewound_source_has_its_own_colour_and_its_ranges():
    """``source_rewound`` comes before every other verdict, coloured apart from defects."""
    rewound = line("r4", "orders", delivered=250, backfilled=100, rewound=101)
    rewound.rewound_ranges = [(201, 300), (305, 305)]
    assert report.verdict(rewound) == report.REWOUND
    page = render_page([rewound, *LINES], True)
    assert '<li class="card v-rewound" data-verdict="rewound">' in page
    assert '<span class="badge v-rewound">source rewound</span>' in page
    shown = '<div class="rewound">source rewound: 201–300, 305</div>'
    assert page.count(shown) == 2  # the topic's card and the run's line
    css = (Path(report.__file__).parent / "static" / "report.css").read_text()
    assert ".card.v-rewound { border-left-color: var(--rew); background: var(--rew-bg); }" in css
    assert "--rew: #8250df;" in css and "--bad: #b00020;" in css


def test_the_pager_keeps_the_filters():
    many = [line(f"r{i}", "orders") for i in range(45)]
    page = render_page(many, True, filters=report.Filters("orders", "c1", 2))
    assert "page 2 of 3" in page
    assert 'href="?topic=orders&amp;consumer=c1&amp;page=1"' in page
    assert 'href="?topic=orders&amp;consumer=c1&amp;page=3"' in page


# -- Data Docs assets ----------------------------------------------------------------------------
def template_asset_urls() -> set[str]:
    """Absolute URLs in the src/href of GX's <script> and <link> tags."""
    found = set()
    for template in TEMPLATES.glob("*.j2"):
        for tag in re.findall(r"<(?:script|link)\b[^>]*>", template.read_text()):
            found.update(re.findall(r'(?:src|href)="(https?://[^"]+)"', tag))
    return found


def test_every_cdn_url_of_the_gx_templates_is_served_locally():
    urls = template_asset_urls()
    assert len(urls) == 16, sorted(urls)  # GX 1.24.1; a new GX version must be looked at
    assert urls <= set(assets.CDN), sorted(urls - set(assets.CDN))
    for target in assets.CDN.values():
        spec = next(s for s in assets.PACKAGES if target.startswith(s + "/"))
        path = target[len(spec) + 1 :]
        keep = assets.PACKAGES[spec]
        assert any(path == k or (k.endswith("/") and path.startswith(k)) for k in keep), target


def test_a_served_page_loads_nothing_from_a_cdn():
    logo = (
        "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png"
        "?d=20250601T120000.000000Z&dataContextId=abc"
    )
    page = "\n".join(
        [f'<script src="{u}"></script>' for u in sorted(template_asset_urls())]
        + [f'<img class="NO-CACHE" src="{logo}" alt="GX"/>']
        + ['<a href="https://greatexpectations.io/">Great Expectations</a>']
    )
    base = vendor_base("validations/suite/run/20250601/batch.html")
    assert base == "../../../../../static/vendor/"
    out = assets.rewrite(page, base)
    assert re.findall(r'(?:src)="(https?://[^"]+)"', out) == []
    assert 'src="../../../../../static/vendor/jquery@3.7.1/dist/jquery.min.js"' in out
    assert f'src="{base}gx/logo-long.png"' in out
    assert 'href="https://greatexpectations.io/"' in out  # a link, not a load: kept
    assert vendor_base("index.html") == "../static/vendor/"


def test_static_files_stay_in_their_folders(tmp_path: Path):
    (tmp_path / "report.css").write_text("x")
    assert static_file(tmp_path, "report.css") == (tmp_path / "report.css").resolve()
    assert static_file(tmp_path, "../secret") is None
    logo = static_file(tmp_path, "vendor/gx/logo-long.png")
    assert logo is not None and logo.stat().st_size > 0
    assert static_file(tmp_path, "vendor/gx/../../../__init__.py") is None


def test_a_run_that_failed_before_reconcile_is_one_line_naming_its_step():
    from auditsync_plugin.ui.runs import pivot

    failed = {
        "run_id": "r4",
        "run_status": "failed",
        "finished_at": "2025-06-01 12:15:09",
        "consumer": None,
        "topic": None,
        "status": None,
        "count": None,
        "failed_step": "compact",
        "failure_reason": "OSError: <not a directory>",
    }
    ok = {
        "run_id": "r3",
        "run_status": "passed",
        "consumer": "c1",
        "topic": "orders",
        "status": "delivered",
        "count": 5,
        "remaining": None,
    }
    lines = pivot([failed, ok], (), ())
    assert [(x.run_id, x.consumer, x.topic, x.failed_step) for x in lines] == [
        ("r4", "", "", "compact"),
        ("r3", "c1", "orders", ""),
    ]
    assert [(s.topic, s.verdict) for s in report.topic_states(lines)] == [("orders", report.CLEAN)]
    assert report.choices(lines) == (["orders"], ["c1"])
    html = render_page(lines, docs_available=False)
    assert (
        '<div class="failure bad">failed in <b class="failed-step">compact</b>: '
        '<span class="failure-reason">OSError: &lt;not a directory&gt;</span></div>'
    ) in html
    assert html.count('class="failure bad"') == 1


def test_each_run_shows_its_checkpoint_and_a_failed_log_check_is_red() -> None:
    from auditsync_plugin.ui.runs import pivot

    def row(run_id: str, log_status: str | None, checkpoint: dict | None) -> dict:
        return {
            "run_id": run_id,
            "run_status": "passed",
            "consumer": "c1",
            "topic": "orders",
            "status": "delivered",
            "count": 5,
            "log_status": log_status,
            "checkpoint": checkpoint,
        }

    signed = {"size": 8, "root": "nO1A+x==", "note": "…"}
    lines = pivot(
        [
            row("r3", "failed: orders: seq 5 differs from the signed log: …", {"old_size": 8}),
            row("r2", "signed", signed),
            row("r1", "unsigned: no signing key", None),
            row("r0", None, None),
        ],
        (),
        (),
    )
    html = render_page(lines, docs_available=False)
    assert re.findall(r'<div class="checkpoint (\w+)"[^>]*>checkpoint: ([^<]*)<', html) == [
        ("bad", "no checkpoint · "),
        ("muted", "size 8, root nO1A+x== · "),
        ("muted", "no checkpoint · "),
    ]
    assert re.findall(r'<span class="signature">(\w+)</span>', html) == [
        "failed",
        "signed",
        "unsigned",
    ]
    assert 'title="failed: orders: seq 5 differs from the signed log: …"' in html
