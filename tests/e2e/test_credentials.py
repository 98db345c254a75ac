"""The AWS credential chain on every S3 path, against the session's S3 server (which refuses
unsigned requests): the keys sit only in a profile of a shared credentials file, and no process
the test starts has an ``AWS_ACCESS_KEY_ID`` or ``AWS_SECRET_ACCESS_KEY`` in its environment.

One scenario, one pipeline run shared by every assertion (a run costs about a minute here):
the sink lands two topics, is stopped, restarted and resumes from the state it reads back;
``auditsync pipeline run`` passes on the ``s3://`` landing and warehouse (s3a, pyiceberg, the
Great Expectations store); ``auditsync audit-log show`` reads the result; the Airflow sensor and
its trigger see the sink's cursors, once with ``AWS_PROFILE`` and once through an ``aws``
connection that names the profile (and the endpoint and region) with nothing AWS in the
environment at all.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from watch_service.storage import Storage
from watch_service.tools.objectstore import ACCESS_KEY, SECRET_KEY

from ..airflow.conftest import _append as append_records
from ..airflow.conftest import http_json, wait_until
from ..conftest import TEST_BUCKET
from ..spark.test_pipeline import SMALL_RUN
from ..support import ROOT, ServiceProcess, stop, unique

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.s3,
    pytest.mark.spark,
    pytest.mark.airflow,
    pytest.mark.timeout(900),
]

BIN = Path(sys.executable).parent
PROFILE = "auditsync-ops"
CONSUMER = "primary"
COUNTS = (40, 25)


def without_aws(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment less every ``AWS_*`` variable, plus ``extra``; instance
    metadata off (nothing on loopback answers it; the chain must not wait on it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return {
        **env,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "AWS_EC2_METADATA_DISABLED": "true",
        **extra,
    }


def run(argv: list[str], env: dict[str, str], what: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, cwd=ROOT, timeout=600, check=False
    )
    assert done.returncode == 0, f"{what}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_every_s3_path_finds_keys_kept_only_in_a_profile(pg_url, object_store, tmp_path):
    aws = tmp_path / "aws"
    aws.mkdir()
    (aws / "credentials").write_text(
        f"[{PROFILE}]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
    )
    files = {
        "AWS_SHARED_CREDENTIALS_FILE": str(aws / "credentials"),
        "AWS_CONFIG_FILE": str(aws / "config"),  # absent: nothing but the credentials file
    }
    env = without_aws({**files, "AWS_PROFILE": PROFILE, "AWS_ENDPOINT_URL": object_store.endpoint})
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} & set(env)
    root = f"s3://{TEST_BUCKET}/{unique('creds')}"
    landing, warehouse = f"{root}/landing", f"{root}/warehouse"
    signed = Storage.at(landing, object_store.config)  # the test's own view, with the keys

    watch = ServiceProcess(pg_url, log_path=tmp_path / "serve.log").start()
    sink: subprocess.Popen | None = None
    try:
        topics = dict(zip((unique("orders"), unique("payments")), COUNTS, strict=True))
        for topic in topics:
            http_json("PUT", f"{watch.url}/v0/topics/{topic}", {})
        first = {t: n // 2 for t, n in topics.items()}
        for topic, count in first.items():
            append_records(watch.url, topic, count)

        def start_sink(log: Path) -> subprocess.Popen:
            argv = [
                sys.executable, "-m", "watch_service.sink", "--url", watch.url,
                "--topics", ",".join(topics), "--consumer", CONSUMER, "--landing", landing,
                "--database-url", pg_url, "--heartbeat-ms", "1000", "--flush-ms", "100",
            ]  # fmt: skip
            with open(log, "wb") as out:
                return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

        def cursors() -> dict[str, int]:
            raw = signed.read_bytes(f"{CONSUMER}/state.json")
            return dict(json.loads(raw)["cursors"]) if raw else {}

        def landed(wanted: dict[str, int], proc: subprocess.Popen, log: Path):
            def check() -> bool:
                assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
                return all(cursors().get(t, 0) >= n for t, n in wanted.items())

            return check

        # The sink lands, stops, and a restarted one resumes from the state it reads back.
        sink = start_sink(tmp_path / "sink-1.log")
        wait_until(landed(first, sink, tmp_path / "sink-1.log"), 90, "the first sink")
        assert stop(sink) == 0
        state = json.loads(signed.read_bytes(f"{CONSUMER}/state.json") or b"{}")
        assert state["cursors"] == first and state["frame_no"] > 0
        for topic, count in topics.items():
            append_records(watch.url, topic, count - first[topic])
        sink = start_sink(tmp_path / "sink-2.log")
        wait_until(landed(topics, sink, tmp_path / "sink-2.log"), 90, "the restarted sink")
        resumed = re.search(r"resuming after frame (\d+)", (tmp_path / "sink-2.log").read_text())
        assert resumed is not None and int(resumed.group(1)) == state["frame_no"]
        assert stop(sink) == 0
        sink = None
        assert cursors() == topics

        # One pipeline run on the s3:// landing and warehouse passes.
        run_id = unique("credrun")
        done = run(
            [str(BIN / "auditsync"), "pipeline", "run", "--landing", landing, "--work",
             warehouse, "--run-id", run_id, "--database-url", pg_url, "--driver-memory", "1g",
             "--num-partitions", "2", *SMALL_RUN],
            env,
            "pipeline run",
        )  # fmt: skip
        assert f"[pipeline] passed (run {run_id}, " in done.stdout, done.stdout[-3000:]

        # audit-log show reads what the run wrote.
        orders = next(iter(topics))
        shown = run(
            [str(BIN / "auditsync"), "audit-log", "show", "--topic", orders, "--work", warehouse,
             "--database-url", pg_url, "--json", "--limit", "1000"],
            env,
            "audit-log show",
        )  # fmt: skip
        rows = [json.loads(line) for line in shown.stdout.splitlines()]
        assert [r["seq"] for r in rows] == list(range(1, topics[orders] + 1))
        assert {(r["origin"], r["run_id"]) for r in rows} == {("delivered", run_id)}

        # The Airflow sensor sees the sink's cursors: AWS_PROFILE, then an aws connection
        # naming the profile, endpoint and region with no AWS_PROFILE or endpoint around.
        watch_conn = {"conn_type": "http", "host": "127.0.0.1", "port": watch.port}
        airflow = {
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW_CONN_AUDITSYNC_WATCH": json.dumps(watch_conn),
        }
        probe = [sys.executable, "-m", "tests.e2e.sensor_probe", landing, CONSUMER]
        seen = {"poke": True, "trigger": "ready", "cursors": {CONSUMER: topics}}
        out = run(probe, {**env, **airflow}, "sensor with AWS_PROFILE").stdout
        assert json.loads(out.splitlines()[-1]) == seen
        conn = {
            "conn_type": "aws",
            "extra": {
                "profile_name": PROFILE,
                "endpoint_url": object_store.endpoint,
                "region_name": "us-east-1",
            },
        }
        by_conn = without_aws(
            {
                **files,
                **airflow,
                "AIRFLOW_CONN_S3_OPS": json.dumps(conn),
                "AUDITSYNC_AWS_CONN_ID": "s3_ops",
            }
        )
        out = run(probe, by_conn, "sensor with an aws connection").stdout
        assert json.loads(out.splitlines()[-1]) == seen
    finally:
        if sink is not None:
            stop(sink)
        watch.stop()
