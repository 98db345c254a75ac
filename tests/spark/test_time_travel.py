"""Time travel over the audit log, without a JVM: ``auditsync audit-log show`` (through the
``auditsync`` command's own dispatch, in-process) and the Reconciliation page's link to the
audit log as each run left it (the plugin's FastAPI app, its login dependency replaced, over
Starlette's test client).

The warehouse: four one-row commits (topic A seq 1, B 1, A 2, B 2), each a pipeline run that
recorded the snapshot it left; a run that never wrote the audit log and finished after them;
a run of another warehouse.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import psycopg
import pytest

from spark_jobs import time_travel
from spark_jobs.warehouse import readers
from watch_service import cli
from watch_service.store import runs

from ..support import unique
from .warehouse import TS0, Warehouse, build, plugin_client

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "plugins") not in sys.path:  # as Airflow puts it
    sys.path.insert(0, str(ROOT / "plugins"))

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def house(spark, pg_url, tmp_path_factory) -> Warehouse:
    prefix = unique("tt")
    house = build(spark, pg_url, str(tmp_path_factory.mktemp("tt") / "work"), 4, prefix)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        runs.start_run(conn, f"{prefix}-idle")  # wrote nothing: as the table was when it ended
        runs.finish_run(conn, f"{prefix}-idle", True, 0, 0)
        runs.record_snapshots(conn, f"{prefix}-elsewhere", "wh_0000000000000000", {"audit_log": 1})
        for run_id in house.run_ids:  # what the Reconciliation page lists a run by
            runs.commit_reconcile(
                conn, house.layout.catalog, run_id, (0, 0), False, [],
                [("c1", house.topics[0], "delivered", 1, 0)],
            )  # fmt: skip
    return house


def show(capsys, house: Warehouse, *extra: str, work: str | None = None) -> tuple[int, str, str]:
    argv = ["audit-log", "show", "--topic", house.topics[0], "--work", work or house.layout.work]
    code = cli.main([*argv, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def table_lines(house: Warehouse, seqs: list[int]) -> list[str]:
    lines = [f"{'seq':>10}  {'ts':<24}  {'origin':<10}  data"]
    for seq in seqs:
        ts = time_travel.iso_ms(TS0 + seq)
        data = json.dumps({"n": seq, "text": f"record <{seq}> of {house.topics[0]} " + "x" * 40})
        lines.append(f"{seq:>10}  {ts:<24}  {'delivered':<10}  {data[:59]}…")
    return lines


def test_audit_log_show_reads_the_table_as_each_run_left_it(house, pg_url, capsys, tmp_path):
    url = ["--database-url", pg_url]
    a, s = house.topics[0], house.snapshots
    # Run 0 left A's seq 1; run 2 (the third commit) A's 1 and 2; now is the same.
    for run, seqs, snap in ((0, [1], s[0]), (1, [1], s[1]), (2, [1, 2], s[2])):
        code, out, err = show(capsys, house, "--as-of", house.run_ids[run], *url)
        assert (code, err) == (0, "")
        footer = f"({len(seqs)} rows of {a}, snapshot {snap})"
        assert out.splitlines() == [*table_lines(house, seqs), footer]
    code, out, _ = show(capsys, house, "--limit", "1", *url)
    assert out.splitlines()[-1] == f"(1 rows of {a}, snapshot {s[3]}; more after seq 1)"
    code, out, _ = show(capsys, house, "--after", "1", "--json", *url)
    assert [json.loads(line) for line in out.splitlines()] == [
        {
            "topic": a,
            "seq": 2,
            "ts": TS0 + 2,
            "tag": None,
            "node": None,
            "meta": None,
            "data": json.dumps({"n": 2, "text": f"record <2> of {a} " + "x" * 40}),
            "data_sha256": "0" * 64,
            "origin": "delivered",
            "run_id": house.run_ids[2],
            "date": "2026-11-26",
        }
    ]
    # A time: the snapshot current then (just before the second commit: the first).
    history = readers.load(house.layout, pg_url, "audit_log").history()
    before_second = dt.datetime.fromtimestamp((history[1].timestamp_ms - 1) / 1000, dt.UTC)
    code, out, _ = show(capsys, house, "--as-of", before_second.isoformat(), *url)
    assert out.splitlines()[-1] == f"(1 rows of {a}, snapshot {s[0]})"
    code, out, _ = show(capsys, house, "--as-of", "2020-01-01T00:00:00Z", *url)
    assert (code, out.splitlines()[-1]) == (0, f"(0 rows of {a}, no snapshot yet)")
    # A run that wrote nothing: the table as it was when the run finished (after all four).
    code, out, _ = show(capsys, house, "--as-of", house.run_ids[0][:-8] + "-idle", *url)
    assert out.splitlines()[-1] == f"(2 rows of {a}, snapshot {s[3]})"

    prefix = house.run_ids[0][: -len("-run-000")]
    for extra, message in (
        (["--as-of", "no-such-run"], "no pipeline run 'no-such-run'"),
        (
            ["--as-of", f"{prefix}-elsewhere"],
            f"pipeline run '{prefix}-elsewhere' is of another warehouse (wh_0000000000000000), "
            f"not of {house.layout.work} ({house.layout.catalog})",
        ),
        (
            ["--as-of", "2026-11-31T08:00:00Z"],
            "--as-of '2026-11-31T08:00:00Z' is not a timestamp: expected ISO 8601, e.g. "
            "2026-11-26T08:00:00Z",
        ),
        (["--work", "ftp://host/wh"], "unsupported location 'ftp://host/wh'"),
        (
            ["--work", str(tmp_path / "empty")],
            f"warehouse file://{tmp_path / 'empty'} has no audit log yet: no pipeline run has "
            "created it",
        ),
    ):
        code, out, err = show(capsys, house, *url, *extra)
        assert (code, out) == (2, ""), extra
        assert err.startswith(f"auditsync audit-log: {message}") and err.count("\n") == 1, err


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_the_reconciliation_page_links_each_run_to_its_audit_log(house, pg_url, tmp_path):
    client = plugin_client(pg_url, tmp_path, house.layout.work)
    a, b = house.topics
    index = client.get("/")
    assert index.status_code == 200
    for run_id, snap in zip(house.run_ids, house.snapshots):
        link = f'href="audit-log?run={run_id}&amp;topic={a}">snapshot {snap}</a>'
        assert link in index.text, link

    page = client.get("/audit-log", params={"run": house.run_ids[2], "topic": a})
    assert page.status_code == 200
    text = page.text
    assert f"Audit log as run {house.run_ids[2]} left it" in text
    assert f'<span class="muted" id="snapshot">snapshot {house.snapshots[2]}</span>' in text
    assert f'<option value="{a}" selected>{a}</option>' in text
    assert f'<option value="{b}">{b}</option>' in text
    assert text.count('<td class="n">') == 2  # A's seqs 1 and 2
    assert "record &lt;2&gt; of" in text and "record <2>" not in text  # autoescaped
    second = client.get("/audit-log", params={"run": house.run_ids[2], "topic": a, "after": 1})
    assert second.text.count('<td class="n">') == 1 and "← first" in second.text
    other = client.get("/audit-log", params={"run": house.run_ids[1], "topic": b})
    assert (
        other.text.count('<td class="n">') == 1 and f"snapshot {house.snapshots[1]}" in other.text
    )

    missing = client.get("/audit-log", params={"run": "<no-such-run>"})
    assert missing.status_code == 404
    assert "no pipeline run &#39;&lt;no-such-run&gt;&#39;" in missing.text
