"""Landing retention, end to end: the real sink lands three batches of records, two pipeline
runs (``airflow dags test audit_sync``) compact, reconcile and verify the first two, and the
``maintenance`` DAG (``airflow dags test``) with ``AUDITSYNC_LANDING_RETENTION_HOURS=1`` runs.

The first batch's segments are made old by their keys: they are moved, before any run reads
them, into the folder of an hour long past (as a sink writing then would have named them).
After maintenance exactly those are gone; the second batch's (verified, but of this hour) and
the third's (never compacted) are all still there, and ``auditsync pipeline audit`` over the
kept window agrees with the runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from watch_service.protocol.landing_keys import segments_since
from watch_service.storage import Storage

from ..support import unique
from .conftest import (
    BIN,
    ROOT,
    _append,
    dags_test,
    http_json,
    pg_rows,
    pipeline_run_id,
    wait_until,
)

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1500)]
OLD_FOLDER = "2025-07-01/09"


def sink_until_caught_up(url: str, pg_url: str, topic: str, consumer: str, landing: Path) -> None:
    """The real sink, its own process, until its cursor reaches the topic's head."""
    head = http_json("GET", f"{url}/v0/topics/{topic}")["head_seq"]
    log = landing.parent / f"sink-{consumer}.log"
    with open(log, "ab") as out:
        sink = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "watch_service.sink",
                *("--url", url, "--topics", topic, "--consumer", consumer),
                *("--landing", str(landing), "--database-url", pg_url),
                *("--heartbeat-ms", "1000", "--flush-ms", "100", "--flush-rows", "40"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        state = landing / consumer / "state.json"

        def caught_up() -> bool:
            assert sink.poll() is None, log.read_text()[-2000:]
            try:
                return json.loads(state.read_text())["cursors"].get(topic, 0) >= head
            except (OSError, ValueError, KeyError):
                return False

        try:
            wait_until(caught_up, 60, "the sink to reach the head")
        finally:
            sink.send_signal(signal.SIGTERM)
            assert sink.wait(20) == 0


def segment_names(landing: Path, consumer: str) -> list[str]:
    return [k.name for k in segments_since(Storage.at(landing).child(consumer).listing)]


@pytest.fixture(scope="module")
def retained(airflow_home, watch_service, pg_url, tmp_path_factory):
    base = tmp_path_factory.mktemp("retention")
    landing, work = base / "landing", base / "warehouse"
    topic, consumer = unique("kept"), unique("rc")
    url = watch_service.url
    http_json("PUT", f"{url}/v0/topics/{topic}", {})
    c_dir = landing / consumer

    _append(url, topic, 120)
    sink_until_caught_up(url, pg_url, topic, consumer, landing)
    first = segment_names(landing, consumer)
    old = []
    for name in first:  # written an hour long past, as far as their keys say
        target = c_dir / OLD_FOLDER / Path(name).name
        target.parent.mkdir(parents=True, exist_ok=True)
        (c_dir / name).rename(target)
        old.append(f"{OLD_FOLDER}/{Path(name).name}")
    runs = [
        dags_test(
            airflow_home,
            "2025-07-01T10:05:00+00:00",
            pipeline_run_id("20250701T094500Z", "20250701T100000Z"),
            landing=landing,
            warehouse=work,
        )
    ]
    _append(url, topic, 80)
    sink_until_caught_up(url, pg_url, topic, consumer, landing)
    runs.append(
        dags_test(
            airflow_home,
            "2025-07-01T10:20:00+00:00",
            pipeline_run_id("20250701T100000Z", "20250701T101500Z"),
            landing=landing,
            warehouse=work,
        )
    )
    _append(url, topic, 40)  # landed, never compacted
    sink_until_caught_up(url, pg_url, topic, consumer, landing)
    before = segment_names(landing, consumer)
    maintenance = airflow_home.run(
        "dags",
        "test",
        "maintenance",
        "2025-07-02T00:00:00+00:00",
        extra_env={
            "AIRFLOW_VAR_AUDITSYNC_LANDING": str(landing),
            "AIRFLOW_VAR_AUDITSYNC_WAREHOUSE": str(work),
            "AUDITSYNC_LANDING_RETENTION_HOURS": "1",
        },
        timeout=900,
    )
    (base / "maintenance.log").write_text(maintenance.stdout + maintenance.stderr)
    after = segment_names(landing, consumer)
    audit = subprocess.run(
        [
            str(BIN / "auditsync"),
            "pipeline",
            "audit",
            *("--landing", str(landing), "--work", str(work), "--database-url", pg_url),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    statuses = pg_rows(
        pg_url,
        "SELECT run_id, status FROM pipeline_runs WHERE run_id = ANY(%s) ORDER BY run_id",
        [r.run_id for r in runs],
    )
    return {
        "runs": runs,
        "statuses": statuses,
        "old": old,
        "before": before,
        "after": after,
        "maintenance": maintenance,
        "audit": audit,
        "consumer": consumer,
    }


def test_the_runs_pass(retained):
    assert [r.returncode for r in retained["runs"]] == [0, 0], retained["runs"][-1].output[-3000:]
    assert [s for _, s in retained["statuses"]] == ["passed", "passed"]


def test_old_verified_segments_are_gone_and_every_other_is_kept(retained):
    out = retained["maintenance"]
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    old, before, after = retained["old"], retained["before"], retained["after"]
    assert old and set(old) <= set(before)
    assert len(before) > len(old) + 1  # this hour's verified ones and the uncompacted ones
    assert after == [n for n in before if n not in old]


def test_the_audit_over_the_kept_window_agrees(retained):
    audit = retained["audit"]
    assert audit.returncode == 0, (audit.stdout + audit.stderr)[-4000:]
    assert "agrees with the incremental runs" in audit.stdout
