"""The verdict table (``statuses.VERDICTS``) is the one place a status's label, defect,
repairable and colour are written: every summary status has one, the quality gate's and
backfill's lists are read from it, and every colour is a class of the plugin's style sheet."""

from __future__ import annotations

import re

import pytest

from auditsync_plugin.ui import report
from spark_jobs.common import statuses as st

from ..support import ROOT

pytestmark = pytest.mark.unit


def test_every_summary_status_has_one_verdict() -> None:
    assert set(st.VERDICTS) == set(st.SUMMARY_STATUSES)
    assert st.DEFECTS == (st.SILENT_GAP, st.MISMATCH, st.PHANTOM, st.DIVERGENT)
    assert st.REPAIRABLE == (st.SILENT_GAP, st.MISMATCH, st.DIVERGENT)
    assert all(st.VERDICTS[s].defect for s in st.REPAIRABLE)


def test_every_colour_is_a_class_of_the_style_sheet() -> None:
    css = (ROOT / "plugins/auditsync_plugin/ui/static/report.css").read_text()
    classes = set(re.findall(r"\.v-([a-z]+)", css))
    colours = {v.colour for v in st.VERDICTS.values()}
    colours |= {colour for _, colour in report.TOPIC_VERDICTS.values()}
    assert colours <= classes, colours - classes
    assert report.TOPIC_VERDICTS[report.REWOUND][0] == st.VERDICTS[st.SOURCE_REWOUND].label


def test_the_alert_email_colours_a_rewound_source_as_the_page_does() -> None:
    """An e-mail cannot link the page's style sheet, so its template writes the rewound
    colour class's two values itself: the page's (``--rew``, ``--rew-bg``), under the class
    the verdict table names."""
    css = (ROOT / "plugins/auditsync_plugin/ui/static/report.css").read_text()
    page = dict(re.findall(r"--([a-z-]+): (#[0-9a-f]{6});", css))
    email = (ROOT / "plugins/auditsync_plugin/notifications/templates/alert_email.html").read_text()
    assert st.VERDICTS[st.SOURCE_REWOUND].colour == "rewound"  # the page's .v-rewound
    cls = "{{ rewound.colour }}"
    assert f"table.{cls} th {{ background: {page['rew-bg']}; }}" in email
    assert f"table.{cls} td.{cls} {{ color: {page['rew']}; font-weight: 600; }}" in email
