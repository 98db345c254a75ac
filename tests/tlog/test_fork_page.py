"""The Reconciliation page shows a run's fork and paints a checkpoint that does not verify red:
a real rewound source forks a real signed log (``spark_jobs.tlog_run``, as in
``test_fork.py``), the runs are recorded in ``pipeline_runs`` as the pipeline records them, a
third run's recorded checkpoint has its root forged, and the plugin's app (its login replaced)
is served by uvicorn on loopback and opened in the real chromium. The second run's compact
also read re-delivery ranges from the sinks (``redelivered``): the line of its consumer and
topic shows them by verdict."""

from __future__ import annotations

import base64
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from spark_jobs import tlog_run
from spark_jobs.warehouse import readers
from spark_jobs.warehouse.layout import Layout
from watch_service import settings
from watch_service.protocol.tlog import note
from watch_service.store import runs, tlog_runs
from watch_service.tools.local import free_port

from ..support import ROOT, unique
from .house import SCHEMA, audit_table, row

if str(ROOT / "plugins") not in sys.path:  # as Airflow puts it
    sys.path.insert(0, str(ROOT / "plugins"))

pytestmark = [pytest.mark.pg, pytest.mark.browser]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def redelivered(consumer: str, topic: str, a: int, b: int, verdict: str) -> dict:
    return {"consumer": consumer, "topic": topic, "seq_from": a, "seq_to": b,
            "verdict": verdict, "cursor": 12, "frames": [4, 5]}  # fmt: skip


@pytest.fixture
def forked(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Runs r1 (signed 1..10), r2 (the source rewound 6..10: the log forks at 6) and r3 (its
    recorded checkpoint's root forged), of one topic, recorded as the pipeline records them."""
    layout = Layout("", str(tmp_path / "work"), "r1")
    topic, prefix = unique("tfp"), unique("run")
    audit_table(layout, pg_url, [row(topic, s) for s in range(1, 11)])
    signer = note.Signer.generate("auditsync.test/fork")
    monkeypatch.setenv("AUDITSYNC_LOG_SIGNING_KEY", str(signer))
    first = tlog_run.check_and_publish(layout, pg_url, settings.load(), {})
    table = readers.load(layout, pg_url, "audit_log")
    kept = [r for r in readers.scan(table).to_pylist() if r["seq"] < 6]
    again = [row(topic, s, "after") for s in range(6, 13)]
    table.overwrite(pa.Table.from_pylist(kept + again, SCHEMA))
    second = tlog_run.check_and_publish(
        Layout("", layout.work, f"{prefix}-2"), pg_url, settings.load(), {},
        rewound={topic: [(6, 10)]},
    )  # fmt: skip
    cp = dict(second.checkpoints[topic])
    forged_root = b64(bytes(32))
    cp["note"] = cp["note"].replace(f"\n{cp['root']}\n", f"\n{forged_root}\n")
    cp["root"] = forged_root
    recorded = [
        (f"{prefix}-1", first.status, first.checkpoints),
        (f"{prefix}-2", second.status, second.checkpoints),
        (f"{prefix}-3", "signed", {topic: cp}),
    ]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for run_id, status, checkpoints in recorded:
            runs.start_run(conn, run_id, layout.catalog)
            with conn.transaction():
                runs.commit_reconcile(
                    conn, layout.catalog, run_id, (0, 0), False, [],
                    [("c1", topic, "delivered", 1, 0)],
                )  # fmt: skip
            tlog_runs.record(conn, run_id, status, checkpoints)
            if run_id.endswith("-2"):
                runs.record_step(conn, run_id, "compact", {"redelivered": [
                    redelivered("c1", topic, 6, 10, "reissued"),
                    redelivered("c1", topic, 1, 3, "duplicate"),
                    redelivered("c1", topic, 11, 11, "duplicate"),
                    redelivered("c2", topic, 1, 9, "reissued"),  # another consumer's line
                ]})  # fmt: skip
            runs.finish_run(conn, run_id, True, 0, 0)
    return topic, prefix, signer, first.checkpoints[topic], second.checkpoints[topic]


@pytest.fixture
def served(pg_url: str, tmp_path: Path, forked) -> Iterator[str]:
    import uvicorn
    from psycopg.conninfo import conninfo_to_dict

    from auditsync_plugin.ui.app import create_app

    signer = forked[2]
    app = create_app(
        conninfo=lambda: conninfo_to_dict(pg_url),
        gx_root=lambda: str(tmp_path / "gx"),
        auth=lambda: None,
        landing=lambda: None,
        warehouse=lambda: str(tmp_path / "work"),
        log_key=lambda: str(signer.verifier),
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # uvicorn's own flag: its socket listens
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = True
    thread.join(timeout=30)


def test_the_page_shows_the_fork_and_a_checkpoint_that_does_not_verify_is_red(
    served: str, forked, chromium
) -> None:
    topic, prefix, signer, first, second = forked
    new_root, old_root = second["root"], first["root"]
    page = chromium.new_page()
    resp = page.goto(f"{served}?topic={topic}")
    assert resp is not None and resp.status == 200
    rows = page.locator("#runs tbody tr")
    seen = [
        (
            r.locator("td").first.evaluate("td => td.firstChild.textContent"),
            r.locator(".checkpoint").get_attribute("class"),
            r.locator(".checkpoint .verified").inner_text(),
            r.locator(".checkpoint").evaluate("e => getComputedStyle(e).color"),
            [f.inner_text() for f in r.locator(".fork").all()],
            [(d.get_attribute("class"), d.inner_text()) for d in r.locator(".redelivered").all()],
        )
        for r in rows.all()
    ]
    red, muted = "rgb(176, 0, 32)", "rgb(87, 96, 106)"
    fork = (
        f"the signed log forks at seq 6 (source_rewound: 6–10): old checkpoint size 10, root "
        f"{old_root} → new checkpoint size 12, root {new_root}; seqs 1..5 prove into both"
    )
    assert seen == [
        (f"{prefix}-3", "checkpoint bad",
         f"does not verify: checkpoint: the signature of {signer.name} does not verify", red,
         [fork], []),
        (f"{prefix}-2", "checkpoint muted", "verifies", muted, [fork],
         [("redelivered rewound", "re-delivered, reissued: 6–10"),
          ("redelivered muted", "re-delivered, duplicate: 1–3, 11")]),
        (f"{prefix}-1", "checkpoint muted", "verifies", muted, [], []),
    ]  # fmt: skip
    assert re.fullmatch(r"[A-Za-z0-9+/]{43}=", new_root) and new_root != old_root
