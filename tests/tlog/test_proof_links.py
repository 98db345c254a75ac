"""Each row of the plugin's audit-log page links to its proof, and the plugin's ``/proof``
route serves the C2SP tlog-proof text ``auditsync audit-log prove`` prints, in the signed log
of the page's run (the plugin's FastAPI app, its login replaced, over Starlette's test client,
on a real Iceberg audit log and signed log)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

from spark_jobs import tlog_command
from spark_jobs.tlog_store import TopicLog
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service.protocol.tlog import leaf, note, proof
from watch_service.storage import Storage
from watch_service.store import runs

from ..support import ROOT, unique
from .house import audit_table, row

if str(ROOT / "plugins") not in sys.path:  # as Airflow puts it
    sys.path.insert(0, str(ROOT / "plugins"))

pytestmark = [
    pytest.mark.pg,
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`"),
]


def client(pg_url: str, work: str, key: str | None):
    from fastapi.testclient import TestClient
    from psycopg.conninfo import conninfo_to_dict

    from auditsync_plugin.ui.app import create_app

    app = create_app(
        conninfo=lambda: conninfo_to_dict(pg_url),
        gx_root=lambda: str(Path(work) / "gx"),
        auth=lambda: None,
        landing=lambda: None,
        warehouse=lambda: work,
        log_key=lambda: key,
    )
    return TestClient(app)


def test_each_audit_log_row_links_to_its_proof(pg_url: str, tmp_path: Path) -> None:
    layout = Layout("", str(tmp_path / "work"), "")
    topic, run = unique("tp"), unique("run")
    table = audit_table(layout, pg_url, [row(topic, s) for s in range(1, 4)])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        snap = table.current_snapshot().snapshot_id
        runs.record_snapshots(conn, run, layout.catalog, {"audit_log": snap})
    signer = note.Signer.generate("auditsync.test/proofs")
    tlog_command.publish(layout.work, pg_url, signer, run_id=run, topics=[topic])
    http = client(pg_url, layout.work, f"{signer}\n")  # a connection's password, as typed

    page = http.get("/audit-log", params={"run": run, "topic": topic})
    assert page.status_code == 200
    for seq in (1, 2, 3):
        link = f'href="proof?run={run}&amp;topic={topic}&amp;seq={seq}" rel="nofollow">proof</a>'
        assert link in page.text, link
    got = http.get("/proof", params={"run": run, "topic": topic, "seq": 2})
    assert (got.status_code, got.headers["content-type"]) == (200, "text/plain; charset=utf-8")
    log = TopicLog.at(Storage(layout.warehouse), topic, signer.verifier)
    assert got.text == tlog_command.prove(log, 2, run).text()
    entry = leaf.record(readers.audit_log(layout, pg_url, topic).to_pylist()[1])
    assert proof.Proof.parse(got.text).verify(entry, signer.verifier, log.origin) == 3

    latest = client(pg_url, layout.work, str(signer.verifier)).get(
        "/proof", params={"topic": topic, "seq": 3}
    )  # a verifier key is enough; no run: the latest checkpoint
    assert latest.status_code == 200 and latest.text == tlog_command.prove(log, 3).text()
    beyond = http.get("/proof", params={"topic": topic, "seq": 4})
    assert (beyond.status_code, beyond.text) == (
        404,
        f"seq 4 of {topic} is not in its signed log (seqs 1..3)\n",
    )
    unsigned = http.get("/proof", params={"topic": topic, "seq": 1, "run": "<other>"})
    assert (unsigned.status_code, unsigned.text) == (
        404,
        f"no checkpoint of {topic} was signed by run '<other>'\n",
    )
    no_key = client(pg_url, layout.work, None).get("/proof", params={"topic": topic, "seq": 1})
    assert (no_key.status_code, no_key.text) == (
        503,
        "no log key: set the Airflow connection auditsync_log_key's password\n",
    )
