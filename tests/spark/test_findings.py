"""A run's findings: its defect ranges and whether each was repaired, as the command
``auditsync pipeline findings`` prints them (through the ``auditsync`` command's own dispatch,
in-process), as the Reconciliation page's findings view shows them and as its CSV download
gives them (the plugin's FastAPI app, its login dependency replaced, over Starlette's test
client).

The warehouse is written through the jobs' own table module: ``detail`` and ``remaining``
partitions of three runs (one verified with ranges left, one never verified, one whose
leftovers a later verify saw repaired), plus their run rows in PostgreSQL.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from spark_jobs import findings
from spark_jobs.common import selection
from spark_jobs.warehouse import tables
from spark_jobs.warehouse.layout import Layout
from spark_jobs.warehouse.warehouse import Warehouse
from watch_service import cli
from watch_service.store import runs

from ..browser import VIEWPORT, artifact, assert_within_the_window, block_the_internet
from ..support import unique
from .warehouse import plugin_client

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "plugins") not in sys.path:  # as Airflow puts it
    sys.path.insert(0, str(ROOT / "plugins"))

from auditsync_plugin.ui import findings as ui_findings  # noqa: E402

pytestmark = pytest.mark.spark
MANY = 60  # single-seq gaps of one consumer: more than a page (50)


def detail(consumer: str, topic: str, seq: int, seq_to: int, status: str) -> tuple:
    source = None if status == "phantom" else "a" * 64
    return (consumer, topic, seq, seq_to, status, source, None, 0 if status != "delivered" else 1)


class House:
    def __init__(self, prefix: str, layout: Layout) -> None:
        self.layout = layout
        self.verified, self.unverified, self.closed = (f"{prefix}-{n}" for n in ("v", "u", "c"))
        self.elsewhere = f"{prefix}-elsewhere"
        self.topics = (f"{prefix}-a", f"{prefix}-b")


def expected(house: House) -> list[dict]:
    """The verified run's findings, as its detail and remaining rows say (by hand)."""
    a, b = house.topics
    rows = [
        ("c1", a, "silent_gap", 11, 15, 5, 2, "partly"),
        ("c1", a, "mismatch", 16, 16, 1, 0, "yes"),
        ("c1", b, "phantom", 5, 5, 1, 1, "no"),
        ("c2", a, "silent_gap", 20, 22, 3, 0, "yes"),
        *(("c3", b, "silent_gap", s, s, 1, 0, "yes") for s in range(100, 100 + 2 * MANY, 2)),
    ]
    return [dict(zip(findings.COLUMNS, r)) for r in rows]


@pytest.fixture(scope="module")
def house(spark, pg_url, tmp_path_factory) -> House:
    layout = Layout("", str(tmp_path_factory.mktemp("findings") / "work"), "")
    wh = Warehouse.attach(spark, layout, pg_url)
    house = House(unique("fd"), layout)
    a, b = house.topics
    verified = [
        detail("c1", a, 1, 10, "delivered"),
        detail("c1", a, 11, 15, "silent_gap"),
        detail("c1", a, 16, 16, "mismatch"),
        detail("c1", b, 5, 5, "phantom"),
        detail("c2", a, 20, 22, "silent_gap"),
        detail("c2", a, 23, 23, "tombstoned"),
        *(detail("c3", b, s, s, "silent_gap") for s in range(100, 100 + 2 * MANY, 2)),
    ]
    schema, left_schema = tables.SCHEMAS["detail"][0], tables.SCHEMAS["remaining"][0]
    details = {
        house.verified: verified,
        house.unverified: [detail("c1", a, 30, 31, "silent_gap")],
        house.closed: [detail("c1", a, 40, 41, "silent_gap"), detail("c1", b, 9, 9, "phantom")],
    }
    for run_id, rows in details.items():
        df = spark.createDataFrame([(*r, run_id) for r in rows], schema)
        wh.replace_run("detail", run_id, df)
    left = {
        house.verified: [
            (house.verified, *detail("c1", a, 11, 15, "silent_gap"), 2),
            (house.verified, *detail("c1", b, 5, 5, "phantom"), 1),
            ("an-earlier-run", *detail("c1", a, 11, 15, "silent_gap"), 5),  # carried: not ours
        ],
        house.closed: [
            (house.closed, *detail("c1", a, 40, 41, "silent_gap"), 2),
            (house.closed, *detail("c1", b, 9, 9, "phantom"), 1),
        ],
    }
    for run_id, rows in left.items():
        df = spark.createDataFrame([(*r, run_id) for r in rows], left_schema)
        wh.replace_run("remaining", run_id, df)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for run_id in details:
            runs.start_run(conn, run_id)
            runs.record_snapshots(conn, run_id, layout.catalog, {})
            summary = [("c1", a, "silent_gap", 5, 0)] if run_id == house.verified else []
            runs.commit_reconcile(
                conn, layout.catalog, run_id, (0, 0), run_id != house.closed, [], summary
            )
            if run_id != house.unverified:
                runs.record_step(conn, run_id, "verify", {"passed": False})
        runs.record_snapshots(conn, house.elsewhere, "wh_0000000000000000", {})
    return house


def findings_cli(capsys, house: House, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["pipeline", "findings", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def csv_rows(text: str) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(text)))
    ints = ("seq_from", "seq_to", "seqs", "left")
    return [{k: int(v) if k in ints else v for k, v in r.items()} for r in rows]


def test_build_judges_each_range_by_verify():
    run = findings.Run("wh", True, True)
    d = [{"consumer": "c", "topic": "t", "seq": 1, "seq_to": 4, "status": "silent_gap"}]
    left = [{**d[0], "left": 4}]
    assert [r["repaired"] for r in findings.build(d, left, run)] == ["no"]
    assert [r["repaired"] for r in findings.build(d, [], run)] == ["yes"]
    closed = findings.build(d, left, findings.Run("wh", True, False))
    assert (closed[0]["left"], closed[0]["repaired"]) == (0, "yes")
    never = findings.build(d, [], findings.Run("wh", False, None))
    assert (never[0]["left"], never[0]["repaired"]) == (4, "unverified")
    size = selection.FINDINGS_PAGE
    assert selection.page_of(list(range(120)), 9, size) == (list(range(100, 120)), 3, 3)
    assert selection.page_of([], 0, size) == ([], 1, 1)
    sizes = [selection.page_size(x) for x in ("10", " 200 ", "", "7", "abc", "-10", "1e9")]
    assert sizes == [10, 200, 50, 50, 50, 50, 50]
    assert ui_findings.render_csv([]) == ",".join(findings.COLUMNS) + "\r\n"


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_the_csv_the_cli_and_the_page_show_the_detail_rows(house, pg_url, capsys, tmp_path):
    client = plugin_client(pg_url, tmp_path, house.layout.work)
    want = expected(house)
    a, b = house.topics

    got = client.get("/findings.csv", params={"run": house.verified})
    assert got.status_code == 200 and got.headers["content-type"] == "text/csv; charset=utf-8"
    assert got.text.splitlines()[0] == ",".join(findings.COLUMNS)
    assert csv_rows(got.text) == want
    for filters in ({"consumer": "c1"}, {"topic": a}, {"status": "silent_gap", "consumer": "c3"}):
        got = client.get("/findings.csv", params={"run": house.verified, **filters})
        kept = [r for r in want if all(r[k] == v for k, v in filters.items())]
        assert csv_rows(got.text) == kept, filters
    # The page at 10 rows: the second page, its links keep the size; a size not offered is 50.
    got = client.get("/findings", params={"run": house.verified, "rows": "10", "page": "2"})
    assert got.status_code == 200 and got.text.count('<tr class="repaired-') == 10
    assert f"page 2 of {-(-len(want) // 10)} ({len(want)} of {len(want)} ranges)" in got.text
    assert "rows=10&amp;page=3" in got.text and "rows=10&amp;page=1" in got.text
    got = client.get("/findings", params={"run": house.verified, "rows": "7"})
    assert got.text.count('<tr class="repaired-') == min(selection.FINDINGS_PAGE, len(want))

    url = ["--database-url", pg_url]
    code, out, err = findings_cli(capsys, house, "--run", house.verified, "--json", *url)
    assert (code, err) == (0, "")
    assert [json.loads(line) for line in out.splitlines()] == want
    # Without --work: the run's own warehouse; the same filters as the page.
    code, out, _ = findings_cli(
        capsys, house, "--run", house.verified, "--json", "--status", "phantom", *url
    )
    assert [json.loads(line) for line in out.splitlines()] == [want[2]]
    code, out, _ = findings_cli(
        capsys, house, "--run", house.verified, "--work", house.layout.work, "--topic", b, *url
    )
    table = out.splitlines()
    assert table[0].split() == list(findings.COLUMNS)
    assert table[1].split() == ["c1", b, "phantom", "5", "5", "1", "1", "no"]
    assert table[-1] == f"({1 + MANY} of {len(want)} defect ranges of run {house.verified})"
    code, out, _ = findings_cli(capsys, house, "--run", house.unverified, "--json", *url)
    assert [json.loads(line) for line in out.splitlines()] == [
        dict(zip(findings.COLUMNS, ("c1", a, "silent_gap", 30, 31, 2, 2, "unverified")))
    ]
    code, out, _ = findings_cli(capsys, house, "--run", house.closed, "--json", *url)
    assert [(r["status"], r["left"], r["repaired"]) for r in map(json.loads, out.splitlines())] == [
        ("silent_gap", 0, "yes"),
        ("phantom", 1, "no"),
    ]
    for extra, message in (
        (["--run", "no-such-run"], "no pipeline run 'no-such-run'"),
        (
            ["--run", house.elsewhere, "--work", house.layout.work],
            f"pipeline run '{house.elsewhere}' is of another warehouse (wh_0000000000000000), "
            f"not {house.layout.catalog}",
        ),
        (["--run", house.verified, "--work", "ftp://h/w"], "unsupported location 'ftp://h/w'"),
        (["--run", house.verified, "--status", "delivered"], "--status 'delivered': expected"),
    ):
        code, out, err = findings_cli(capsys, house, *extra, *url)
        assert (code, out) == (2, ""), extra
        prefix = f"auditsync pipeline findings: {message}"
        assert err.startswith(prefix) and err.count("\n") == 1, err

    page = client.get("/findings", params={"run": house.verified})
    assert page.status_code == 200
    assert page.text.count('<tr class="repaired-') == 50
    assert f"page 1 of 2 ({len(want)} of {len(want)} ranges)" in page.text
    assert 'href="findings.csv?run=' in page.text
    second = client.get("/findings", params={"run": house.verified, "page": 2})
    assert second.text.count('<tr class="repaired-') == len(want) - 50
    assert "page 2 of 2" in second.text and "← previous" in second.text
    only = client.get("/findings", params={"run": house.verified, "consumer": "c1"})
    assert only.text.count('<tr class="repaired-') == 3 and "page 1 of 1 (3 of" in only.text
    assert '<option value="c1" selected>c1</option>' in only.text
    index = client.get("/")
    link = f'href="findings?run={house.verified}&amp;consumer=c1&amp;topic={a}">findings</a>'
    assert link in index.text  # from the run's line of the runs table
    missing = client.get("/findings", params={"run": "<no-such-run>"})
    assert missing.status_code == 404 and "no pipeline run &#39;&lt;no-such-run&gt;&#39;" in (
        missing.text
    )
    assert client.get("/findings.csv", params={"run": "no-such-run"}).status_code == 404
    assert client.get("/findings.csv").status_code == 404
    bad = client.get("/findings", params={"run": house.verified, "page": "x"})
    assert bad.status_code == 200 and "page 1 of 2" in bad.text
    none = client.get("/findings")
    assert none.status_code == 404 and "no run given" in none.text


@pytest.fixture
def served(house, pg_url, tmp_path):
    """The plugin's app (login dependency replaced) under uvicorn on a loopback socket bound
    here, so it accepts connections before the server thread serves them."""
    import socket
    import threading

    import uvicorn

    from auditsync_plugin.ui.app import create_app

    app = create_app(
        conninfo=lambda: conninfo_to_dict(pg_url),
        gx_root=lambda: tmp_path,
        auth=lambda: None,
        landing=lambda: None,
        warehouse=lambda: house.layout.work,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.mark.browser
def test_the_findings_view_shows_every_column_at_1280(house, served, chromium):
    """Headless Chromium at 1280 × 800 on the findings page: every column inside the window,
    nothing scrolled sideways, the rows the CSV's first page; a screenshot for the record."""
    import urllib.request

    url = f"{served}/findings?run={house.verified}"
    with urllib.request.urlopen(f"{served}/findings.csv?run={house.verified}", timeout=30) as r:
        ranges = list(csv.reader(io.StringIO(r.read().decode())))
    context = chromium.new_context(viewport=VIEWPORT)
    refused = block_the_internet(context)
    page = context.new_page()
    resp = page.goto(url)
    assert resp is not None and resp.status == 200
    assert assert_within_the_window(page, "#findings thead th") == len(findings.COLUMNS)
    cells = assert_within_the_window(page, "#findings tbody td")
    assert cells == selection.FINDINGS_PAGE * len(findings.COLUMNS)
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]
    shown = [r.locator("td").all_inner_texts() for r in page.locator("#findings tbody tr").all()]
    assert shown == ranges[1 : 1 + selection.FINDINGS_PAGE]
    page.select_option("#filter-consumer", "c1")
    with page.expect_navigation():
        page.click("#filters button")
    assert page.locator("#findings tbody tr").count() == 3
    page.screenshot(path=str(artifact("findings.png")), full_page=True)
    assert refused == [], refused
